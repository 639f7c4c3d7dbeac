// Small shared pieces: an API error said plainly, status badges, a copy button.
import { useState } from 'preact/hooks';
import { html } from '../html.js';

/** An ApiError (or any Error) as an alert; nothing when err is null. */
export function ErrorNote({ err, label = null }) {
  if (!err) return null;
  // the server's label for the field (the message already starts with it when it is about one)
  const named = err.label || err.field;
  const field = named && !String(err.message || '').startsWith(named) ? ` (${named})` : '';
  return html`<p class="error" role="alert">${label ? `${label}: ` : ''}${err.message}${field}</p>`;
}

const STATUS_CLASS = { active: 'ok', staged: 'warn', healthy: 'ok', starting: 'info', submitted: 'info',
  pending: 'info', unhealthy: 'bad', ending: 'muted', ended: 'muted', lost: 'bad', paused: 'muted', bad: 'bad', muted: 'muted' };

export function Badge({ value, label = null }) {
  return html`<span class=${`badge ${STATUS_CLASS[value] || 'muted'}`}>${label || value}</span>`;
}

/** A button copying text to the clipboard; says "Copied" (politely, to screen readers too). */
export function CopyButton({ text, label = 'Copy' }) {
  const [said, setSaid] = useState('');
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(text);
      setSaid('Copied');
    } catch {
      setSaid('Copy failed: select the text and copy it');
    }
    setTimeout(() => setSaid(''), 4000);
  };
  return html`<span class="copy">
    <button type="button" onClick=${copy}>${label}</button>
    <span class="copy-said" role="status">${said}</span>
  </span>`;
}

/** A labelled value in a definition list. */
export function Item({ term, children }) {
  return html`<div class="item"><dt>${term}</dt><dd>${children}</dd></div>`;
}
