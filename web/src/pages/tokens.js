// /tokens: personal access tokens (docs/access.md "Tokens for scripts"). A signed-in user lists their
// tokens, makes one (shown once, with a copy button) with a role no higher than theirs, and revokes one
// (asks first). The roles offered are the server's (GET /api/v1/session: token_roles; none for the
// admin token, which is no user); another user's tokens only with users.manage (session `can`).
import { useState } from 'preact/hooks';
import { html } from '../html.js';
import { api } from '../api.js';
import { navigate } from '../router.js';
import { useResource, useNow } from '../live.js';
import { useSession, can } from '../session.js';
import { Layout } from '../components/layout.js';
import { ConfirmDialog } from '../components/dialog.js';
import { CopyButton, ErrorNote, Badge } from '../components/notice.js';
import { timestamp } from '../lib/format.js';
import { tokenState, tokenColumns } from '../lib/access.js';

const STATE_BADGE = { active: 'active', revoked: 'ended', expired: 'muted' };

function CreateToken({ roles, onCreated }) {
  const [name, setName] = useState('');
  // the user's own role (the highest offered) unless they pick a lower one
  const [role, setRole] = useState(roles[roles.length - 1]);
  const [err, setErr] = useState(null);
  const [busy, setBusy] = useState(false);
  const create = async (e) => {
    e.preventDefault();
    if (busy) return;
    setBusy(true);
    setErr(null);
    try {
      const t = await api.post('/tokens', { name, role });
      setName('');
      onCreated(t);
    } catch (x) { setErr(x); }
    setBusy(false);
  };
  return html`<form class="inline-form" onSubmit=${create}>
      <label for="token-name">Name</label>
      <input id="token-name" value=${name} maxlength="128" onInput=${(e) => setName(e.currentTarget.value)}
        aria-describedby="token-name-help" />
      <span class="help" id="token-name-help">What uses it, e.g. “nightly benchmark”.</span>
      <label for="token-role">Role</label>
      <select id="token-role" value=${role} onChange=${(e) => setRole(e.currentTarget.value)} aria-describedby="token-role-help">
        ${roles.map((r) => html`<option key=${r} value=${r}>${r}</option>`)}
      </select>
      <button type="submit" class="primary" aria-disabled=${busy ? 'true' : undefined}>Create token</button>
      <span class="help" id="token-role-help">A token acts as you, with this role: at most yours.</span>
    </form>
    <${ErrorNote} err=${err} label="The token was not made" />`;
}

function NewToken({ token, onDone }) {
  return html`<div class="new-key" role="status">
    <p><strong>Token “${token.name || token.prefix}” created.</strong> Copy it now: you won't see it again.
      Only its hash is kept; if it is lost, revoke it and make another.</p>
    <p><input class="mono key-value" readonly value=${token.token} aria-label="New personal access token"
        onFocus=${(e) => e.currentTarget.select()} />
      <${CopyButton} text=${token.token} label="Copy token" />
      <button type="button" onClick=${onDone}>Done</button></p>
  </div>`;
}

function UserFilter({ value }) {
  const [user, setUser] = useState(value || '');
  const show = (e) => {
    e.preventDefault();
    const u = user.trim();
    navigate(u ? `/tokens?user=${encodeURIComponent(u)}` : '/tokens');
  };
  return html`<form class="inline-form" onSubmit=${show}>
    <label for="token-user">User</label>
    <input id="token-user" value=${user} onInput=${(e) => setUser(e.currentTarget.value)} aria-describedby="token-user-help" />
    <button type="submit">Show</button>
    <span class="help" id="token-user-help">Another user's tokens (you may revoke them). Empty: yours.</span>
  </form>`;
}

export function Tokens({ loc }) {
  const session = useSession();
  const user = (loc.search.get('user') || '').trim() || null;
  const tokens = useResource(() => api.get('/tokens', { user }), [], [user]);
  const now = useNow(30);
  const [created, setCreated] = useState(null);
  const [revoke, setRevoke] = useState(null);
  const [revokeErr, setRevokeErr] = useState(null);
  const [busy, setBusy] = useState(false);

  const doRevoke = async () => {
    if (busy) return;
    setBusy(true);
    try {
      await api.del(`/tokens/${revoke.id}`);
      setRevoke(null);
      setRevokeErr(null);
      tokens.reload();
    } catch (x) { setRevokeErr(x.message); }
    setBusy(false);
  };

  const roles = (session && session.token_roles) || [];
  const me = session ? session.user : null;
  const list = tokens.data ? tokens.data.tokens : [];
  const cols = tokenColumns(list, me);
  const whose = user && user !== me ? `${user}'s tokens` : me ? 'Your tokens' : 'Every user\'s tokens';
  return html`<${Layout} title="Personal access tokens" path=${loc.path}>
    <p class="help">A script sends a token as <code>Authorization: Bearer obp_…</code> to the Management API and acts as
      you, with the token's role. A token is shown once, when it is made.</p>

    <section class="card" aria-labelledby="new-token-h">
      <div class="card-head"><h2 id="new-token-h">Create a token</h2></div>
      ${!session ? html`<p class="empty">Loading…</p>`
        : roles.length === 0 ? html`<p class="help">You are signed in with the admin token, which is no user and makes
            no personal tokens: sign in as yourself to make one.</p>`
        : html`<${CreateToken} roles=${roles} onCreated=${(t) => { setCreated(t); tokens.reload(); }} />`}
      ${created && html`<${NewToken} token=${created} onDone=${() => setCreated(null)} />`}
    </section>

    <section class="card" aria-labelledby="tokens-h">
      <div class="card-head"><h2 id="tokens-h">${whose}</h2></div>
      ${can(session, 'users.manage') && html`<${UserFilter} value=${user} />`}
      <${ErrorNote} err=${tokens.error} />
      ${list.length === 0 ? html`<p class="empty">${tokens.loading ? 'Loading…' : 'No personal access tokens.'}</p>` : html`
      <div class="table-wrap"><table>
        <caption class="sr-only">${whose}</caption>
        <thead><tr><th scope="col">Name</th><th scope="col">Token starts with</th>${cols.user && html`<th scope="col">User</th>`}
          <th scope="col">Role</th><th scope="col">Created</th>${cols.lastUsed && html`<th scope="col">Last used</th>`}
          ${cols.expires && html`<th scope="col">Expires</th>`}<th scope="col">State</th>
          <th scope="col"><span class="sr-only">Actions</span></th></tr></thead>
        <tbody>${list.map((t) => {
          const state = tokenState(t, now);
          return html`<tr key=${t.id}>
          <th scope="row">${t.name || html`<span class="muted">(no name)</span>`}</th>
          <td class="mono">${t.prefix}…</td>
          ${cols.user && html`<td>${t.user}</td>`}
          <td>${t.role}</td>
          <td>${timestamp(t.created_at)}</td>
          ${cols.lastUsed && html`<td>${t.last_used_at ? timestamp(t.last_used_at) : html`<span class="muted">never</span>`}</td>`}
          ${cols.expires && html`<td>${t.expires_at ? timestamp(t.expires_at) : html`<span class="muted">never</span>`}</td>`}
          <td><${Badge} value=${STATE_BADGE[state]} label=${state} />${t.revoked_at ? html` <span class="muted small">${timestamp(t.revoked_at)}</span>` : ''}</td>
          <td>${state !== 'revoked' && html`<button type="button" class="small danger" onClick=${() => { setRevokeErr(null); setRevoke(t); }}
            aria-label=${`Revoke token ${t.name || t.prefix}`}>Revoke</button>`}</td>
        </tr>`;
        })}</tbody>
      </table></div>`}
    </section>

    ${revoke && html`<${ConfirmDialog} title="Revoke this token?" confirmLabel="Revoke token" busy=${busy} error=${revokeErr}
      onCancel=${() => setRevoke(null)} onConfirm=${doRevoke}>
      <p>Token “${revoke.name || revoke.prefix}” (${revoke.prefix}…)${revoke.user !== me ? ` of ${revoke.user}` : ''} stops
        working at once: scripts using it get 401. This cannot be undone.</p>
    <//>`}
  <//>`;
}
