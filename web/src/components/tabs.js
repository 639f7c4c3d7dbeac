// Tabs with the WAI-ARIA tabs pattern: a role="tablist" of role="tab" buttons, each controlling a
// role="tabpanel". Only the selected tab is in the Tab order; ArrowLeft / ArrowRight (wrapping), Home
// and End move the selection and the focus. Used by the Slurm sheet and New deployment's first step.
import { useRef } from 'preact/hooks';
import { html } from '../html.js';

export const tabId = (prefix, key) => `${prefix}tab-${key}`;
export const panelId = (prefix, key) => `${prefix}panel-${key}`;

/** tabs: [[key, label], ...]; selected: a key; onSelect(key). prefix keeps ids apart on one page. */
export function TabList({ label, tabs, selected, onSelect, prefix = '' }) {
  const refs = useRef({});
  const onKey = (e) => {
    const i = tabs.findIndex(([k]) => k === selected);
    let j = null;
    if (e.key === 'ArrowRight') j = (i + 1) % tabs.length;
    if (e.key === 'ArrowLeft') j = (i - 1 + tabs.length) % tabs.length;
    if (e.key === 'Home') j = 0;
    if (e.key === 'End') j = tabs.length - 1;
    if (j == null) return;
    e.preventDefault();
    onSelect(tabs[j][0]);
    refs.current[tabs[j][0]].focus();
  };
  return html`<div role="tablist" aria-label=${label} class="tabs">
    ${tabs.map(([k, text]) => html`<button key=${k} type="button" role="tab" id=${tabId(prefix, k)} aria-controls=${panelId(prefix, k)}
      aria-selected=${selected === k ? 'true' : 'false'} tabindex=${selected === k ? 0 : -1} ref=${(el) => { refs.current[k] = el; }}
      onClick=${() => onSelect(k)} onKeyDown=${onKey}>${text}</button>`)}
  </div>`;
}

/** The panel of tab `key`; hidden unless selected (kept in the page, so what is typed in it stays). */
export function TabPanel({ name, selected, prefix = '', children }) {
  return html`<div role="tabpanel" id=${panelId(prefix, name)} aria-labelledby=${tabId(prefix, name)} hidden=${selected !== name}
    class="panel">${children}</div>`;
}
