// /audit: the audit trail (GET /api/v1/audit, docs/access.md "Audit"): every write through the API,
// newest first, who made it (user or token:admin, how they came in, their role), when, the route and its
// target, the model, the status and a summary of the change without secrets (the server masks them).
// Filters are the route's (user, model, since, limit), kept in the page's URL so a view can be linked.
// The header shows the page to roles whose `can` has audit.read; the server refuses the others anyway.
// Every string is rendered as text: an actor or a summary is whatever someone sent.
import { useState } from 'preact/hooks';
import { html } from '../html.js';
import { api } from '../api.js';
import { Link, navigate } from '../router.js';
import { useResource } from '../live.js';
import { Layout } from '../components/layout.js';
import { ErrorNote } from '../components/notice.js';
import { timestamp } from '../lib/format.js';
import { auditQuery, auditHref, utcInputToEpoch, epochToUtcInput, viaText, summaryText, moreNote } from '../lib/access.js';

// the form starts from the URL's own filters (not the page's default limit)
function Filters({ search }) {
  const [user, setUser] = useState(search.get('user') || '');
  const [model, setModel] = useState(search.get('model') || '');
  const [since, setSince] = useState(epochToUtcInput(search.get('since')));
  const [limit, setLimit] = useState(search.get('limit') || '');
  const apply = (e) => {
    e.preventDefault();
    navigate(auditHref({ user, model, since: utcInputToEpoch(since), limit }));
  };
  const clear = () => {
    setUser(''); setModel(''); setSince(''); setLimit('');
    navigate('/audit');
  };
  return html`<form class="inline-form filters" aria-label="Filter the audit trail" onSubmit=${apply}>
    <label for="audit-user">User</label>
    <input id="audit-user" class="medium" value=${user} onInput=${(e) => setUser(e.currentTarget.value)} aria-describedby="audit-user-help" />
    <label for="audit-model">Model</label>
    <input id="audit-model" class="medium" value=${model} onInput=${(e) => setModel(e.currentTarget.value)} aria-describedby="audit-model-help" />
    <label for="audit-since">Since (UTC)</label>
    <input id="audit-since" class="medium" type="datetime-local" step="1" value=${since} onInput=${(e) => setSince(e.currentTarget.value)} />
    <label for="audit-limit">Show</label>
    <input id="audit-limit" class="narrow" inputmode="numeric" value=${limit} onInput=${(e) => setLimit(e.currentTarget.value)}
      aria-describedby="audit-limit-help" />
    <button type="submit" class="primary">Apply</button>
    <button type="button" onClick=${clear}>Clear</button>
    <span class="help" id="audit-user-help">A user's name, or <code>token:admin</code> for the admin token.</span>
    <span class="help" id="audit-model-help">An API model name or a model id.</span>
    <span class="help" id="audit-limit-help">How many of the newest entries (empty: 100).</span>
  </form>`;
}

function Entry({ e, names }) {
  const summary = summaryText(e.summary);
  const name = e.model_id != null ? names.get(e.model_id) : null;
  return html`<tr>
    <td class="small">${timestamp(e.at)}</td>
    <th scope="row"><span class="actor">${e.actor}</span><br /><span class="muted small">${viaText(e)}</span></th>
    <td><span class="mono">${e.method} ${e.target}</span></td>
    <td>${e.model_id == null ? html`<span class="muted">—</span>`
      : name != null ? html`<${Link} href=${`/deployments/${e.model_id}`}>${name}<//>`
      : html`<span class="muted">model ${e.model_id} (deleted)</span>`}</td>
    <td class="num">${e.status}</td>
    <td>${summary === '' ? html`<span class="muted">—</span>` : html`<details class="audit-change">
      <summary>Change</summary><pre class="code">${summary}</pre></details>`}</td>
  </tr>`;
}

export function Audit({ loc }) {
  const query = auditQuery(loc.search);
  const key = JSON.stringify(query);
  const entries = useResource(() => api.get('/audit', query), [], [key]);
  // the models' names (a deleted model keeps its id in the trail, not its name)
  const models = useResource(() => api.get('/models'), ['models']);
  const names = new Map(((models.data && models.data.models) || []).map((m) => [m.id, m.name]));
  // after a refused filter, the error alone (not the entries of the filters before)
  const list = entries.data && !entries.error ? entries.data.entries : [];
  const filtered = Object.keys(query).some((k) => k !== 'limit');
  const more = entries.data && moreNote(list.length, query.limit);
  const refresh = html`<button type="button" onClick=${() => { entries.reload(); models.reload(); }}>Refresh</button>`;
  // a role the policy does not let read the trail: the server's words, and nothing to filter
  if (entries.error && entries.error.status === 403) {
    return html`<${Layout} title="Audit" path=${loc.path}><${ErrorNote} err=${entries.error} /><//>`;
  }
  return html`<${Layout} title="Audit" path=${loc.path} actions=${refresh}>
    <p class="help">Every write through the Management API: who made it, when, the request and a summary of the
      change, without secrets. Newest first.</p>
    <section class="card" aria-labelledby="audit-filter-h">
      <div class="card-head"><h2 id="audit-filter-h">Filters</h2></div>
      <${Filters} key=${key} search=${loc.search} />
    </section>
    <section class="card" aria-labelledby="audit-h">
      <div class="card-head"><h2 id="audit-h">Entries</h2></div>
      <${ErrorNote} err=${entries.error} />
      ${entries.error ? null : list.length === 0 ? html`<p class="empty">${entries.loading ? 'Loading…'
        : filtered ? 'No entries match these filters.' : 'Nothing recorded yet.'}</p>` : html`
      <div class="table-wrap"><table class="audit">
        <caption class="sr-only">Audit entries, newest first</caption>
        <thead><tr><th scope="col">When</th><th scope="col">Who</th><th scope="col">Request</th><th scope="col">Model</th>
          <th scope="col">Status</th><th scope="col">Change</th></tr></thead>
        <tbody>${list.map((e) => html`<${Entry} key=${e.id} e=${e} names=${names} />`)}</tbody>
      </table></div>`}
      ${more && html`<p class="help">${more}</p>`}
    </section>
  <//>`;
}
