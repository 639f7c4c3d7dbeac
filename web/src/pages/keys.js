// /keys: client API keys for the OpenAI-compatible router. A new key is shown
// once, with a copy button; the list never holds a key, only its prefix.
import { useState } from 'preact/hooks';
import { html } from '../html.js';
import { api } from '../api.js';
import { useResource } from '../live.js';
import { Layout } from '../components/layout.js';
import { ConfirmDialog } from '../components/dialog.js';
import { CopyButton, ErrorNote, Badge } from '../components/notice.js';
import { timestamp } from '../lib/format.js';
import { limitsText, usageText, limitValue } from '../lib/keys.js';

export function Keys({ loc }) {
  const keys = useResource(() => api.get('/keys'), ['keys']);
  const router = useResource(() => api.get('/settings/router'), ['settings', 'keys']);
  const [name, setName] = useState('');
  const [rpm, setRpm] = useState('');
  const [maxc, setMaxc] = useState('');
  const [created, setCreated] = useState(null);
  const [err, setErr] = useState(null);
  const [busy, setBusy] = useState(false);
  const [revoke, setRevoke] = useState(null);

  const create = async (e) => {
    e.preventDefault();
    if (busy) return;
    setBusy(true);
    setErr(null);
    try {
      const k = await api.post('/keys', { name: name.trim() === '' ? null : name, requests_per_minute: limitValue(rpm), max_concurrent: limitValue(maxc) });
      setCreated(k);
      setName('');
      setRpm('');
      setMaxc('');
      keys.reload();
    } catch (x) { setErr(x); }
    setBusy(false);
  };
  const doRevoke = async () => {
    if (busy) return;
    setBusy(true);
    try { await api.del(`/keys/${revoke.id}`); setRevoke(null); keys.reload(); } catch (x) { setErr(x); setRevoke(null); }
    setBusy(false);
  };
  const setKeyless = async (on) => {
    setErr(null);
    try { await api.put('/settings/router', { keyless: on }); router.reload(); } catch (x) { setErr(x); }
  };

  const list = keys.data ? keys.data.keys : [];
  // "last used" only when the server records it: a column saying "never" for every key would mislead
  const hasUsed = list.some((k) => 'last_used_at' in k);
  return html`<${Layout} title="Client keys" path=${loc.path}>
    <p class="help">Clients send a key as <code>Authorization: Bearer obk_…</code> on <code>/v1/</code> requests. A key is shown once, when it is made.</p>
    <${ErrorNote} err=${err} label="That did not work" />

    <section class="card" aria-labelledby="new-h">
      <div class="card-head"><h2 id="new-h">Create a key</h2></div>
      <form class="inline-form" onSubmit=${create}>
        <label for="key-name">Name</label>
        <input id="key-name" value=${name} maxlength="128" onInput=${(e) => setName(e.currentTarget.value)}
          aria-describedby="key-name-help" />
        <span class="help" id="key-name-help">Who or what uses it, e.g. “chat frontend”.</span>
        <label for="key-rpm">Requests a minute</label>
        <input id="key-rpm" class="narrow" inputmode="numeric" value=${rpm} onInput=${(e) => setRpm(e.currentTarget.value)}
          aria-describedby="key-limits-help" />
        <label for="key-maxc">At once</label>
        <input id="key-maxc" class="narrow" inputmode="numeric" value=${maxc} onInput=${(e) => setMaxc(e.currentTarget.value)}
          aria-describedby="key-limits-help" />
        <button type="submit" class="primary" aria-disabled=${busy ? 'true' : undefined}>Create key</button>
        <span class="help" id="key-limits-help">Optional limits: beyond them the router answers 429 with Retry-After. Empty: no limit.</span>
      </form>
      ${created && html`<div class="new-key" role="status">
        <p><strong>Key “${created.name || created.prefix}” created.</strong> Copy it now: it is not shown again.</p>
        <p><input class="mono key-value" readonly value=${created.key} aria-label="New client key" onFocus=${(e) => e.currentTarget.select()} />
          <${CopyButton} text=${created.key} label="Copy key" />
          <button type="button" onClick=${() => setCreated(null)}>Done</button></p>
      </div>`}
    </section>

    <section class="card" aria-labelledby="list-h">
      <div class="card-head"><h2 id="list-h">Keys</h2></div>
      <${ErrorNote} err=${keys.error} />
      ${list.length === 0 ? html`<p class="empty">${keys.loading ? 'Loading…' : 'No client keys yet.'}</p>` : html`
      <div class="table-wrap"><table>
        <caption class="sr-only">Client keys</caption>
        <thead><tr><th scope="col">Name</th><th scope="col">Key starts with</th><th scope="col">Owner</th><th scope="col">Limits</th><th scope="col">Usage</th><th scope="col">Created</th>${hasUsed && html`<th scope="col">Last used</th>`}<th scope="col">State</th><th scope="col"><span class="sr-only">Actions</span></th></tr></thead>
        <tbody>${list.map((k) => html`<tr key=${k.id}>
          <th scope="row">${k.name || html`<span class="muted">(no name)</span>`}</th>
          <td class="mono">${k.prefix}…</td>
          <td>${k.owner || html`<span class="muted">—</span>`}</td>
          <td>${limitsText(k)}</td>
          <td>${usageText(k.usage)}</td>
          <td>${timestamp(k.created_at)}</td>
          ${hasUsed && html`<td>${k.last_used_at ? timestamp(k.last_used_at) : html`<span class="muted">never</span>`}</td>`}
          <td>${k.revoked_at ? html`<${Badge} value="ended" label="revoked" />` : html`<${Badge} value="active" />`}</td>
          <td>${!k.revoked_at && html`<button type="button" class="small danger" onClick=${() => setRevoke(k)}
            aria-label=${`Revoke key ${k.name || k.prefix}`}>Revoke</button>`}</td>
        </tr>`)}</tbody>
      </table></div>`}
    </section>

    <section class="card" aria-labelledby="keyless-h">
      <div class="card-head"><h2 id="keyless-h">Keyless access</h2></div>
      ${router.data ? html`<label class="check"><input type="checkbox" checked=${router.data.keyless}
          onChange=${(e) => setKeyless(e.currentTarget.checked)} />
        Accept <code>/v1/</code> requests without a client key</label>
        <p class="help">Only for sites behind their own gateway: anyone who can reach obleth can then use every model.</p>`
        : html`<${ErrorNote} err=${router.error} />`}
    </section>

    ${revoke && html`<${ConfirmDialog} title="Revoke this key?" confirmLabel="Revoke" busy=${busy}
      onCancel=${() => setRevoke(null)} onConfirm=${doRevoke}>
      <p>Key “${revoke.name || revoke.prefix}” (${revoke.prefix}…) stops working at once. Clients using it get 401.</p>
    <//>`}
  <//>`;
}
