// A modal dialog on the native <dialog> element: showModal() makes the rest of
// the page inert and moves focus inside; Escape closes it; focus goes back to
// what had it before. Title is the dialog's accessible name.
import { useEffect, useRef } from 'preact/hooks';
import { html } from '../html.js';

let seq = 0;

export function Dialog({ title, onClose, children, wide = false, initialFocus = null, describedBy = null }) {
  const ref = useRef(null);
  const idRef = useRef(`dlg-${++seq}`);
  useEffect(() => {
    const d = ref.current;
    const before = document.activeElement;
    if (!d.open) d.showModal();
    const first = initialFocus && d.querySelector(initialFocus);
    if (first) first.focus();
    const onCancel = (e) => { e.preventDefault(); onClose(); };
    d.addEventListener('cancel', onCancel);
    return () => {
      d.removeEventListener('cancel', onCancel);
      if (d.open) d.close();
      if (before && before.isConnected && typeof before.focus === 'function') before.focus();
    };
  }, []);
  const id = idRef.current;
  return html`<dialog ref=${ref} class=${wide ? 'dialog wide' : 'dialog'} aria-labelledby=${id}
      aria-describedby=${describedBy || undefined}>
    <header class="dialog-head">
      <h2 id=${id}>${title}</h2>
      <button type="button" class="icon" aria-label="Close" onClick=${onClose}>×</button>
    </header>
    <div class="dialog-body">${children}</div>
  </dialog>`;
}

/** Ask before something that cannot be undone. onConfirm may be async; errors show in the dialog. */
export function ConfirmDialog({ title, children, confirmLabel, onConfirm, onCancel, danger = true, busy = false, error = null }) {
  return html`<${Dialog} title=${title} onClose=${onCancel} initialFocus=".cancel">
    <div class="confirm-text">${children}</div>
    ${error && html`<p class="error" role="alert">${error}</p>`}
    <div class="actions">
      <button type="button" class="cancel" onClick=${onCancel}>Cancel</button>
      <button type="button" class=${danger ? 'danger' : 'primary'} aria-disabled=${busy ? 'true' : undefined}
        onClick=${() => { if (!busy) onConfirm(); }}>${confirmLabel}</button>
    </div>
  <//>`;
}
