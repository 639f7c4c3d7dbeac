// /deployments: the Slurm card, the models with their status and replicas,
// and "New deployment". ?slurm=1 opens the Slurm sheet (?slurm=1&tab=defaults
// opens it on Cluster defaults).
import { useState } from 'preact/hooks';
import { html } from '../html.js';
import { api } from '../api.js';
import { Link, navigate } from '../router.js';
import { useResource } from '../live.js';
import { Layout } from '../components/layout.js';
import { useSession, can } from '../session.js';
import { SlurmCard } from '../components/slurm-card.js';
import { SlurmSheet } from '../components/slurm-sheet.js';
import { Badge, ErrorNote } from '../components/notice.js';
import { healthyCount } from '../lib/replica.js';

async function loadModels() {
  const [models, managed, replicas] = await Promise.all([
    api.get('/models'), api.get('/managed'), api.get('/replicas', { state: 'live' }),
  ]);
  const specs = new Map(managed.managed.map((m) => [m.model_id, m]));
  const reps = new Map();
  for (const r of replicas.replicas) {
    if (!reps.has(r.model_id)) reps.set(r.model_id, []);
    reps.get(r.model_id).push(r);
  }
  return models.models.map((m) => ({ ...m, spec: specs.get(m.id) || null, replicas: reps.get(m.id) || [] }));
}

function ModelsTable({ rows }) {
  if (rows.length === 0) {
    return html`<p class="empty">No models yet. Choose <strong>New deployment</strong> to launch one.</p>`;
  }
  return html`<div class="table-wrap"><table class="models">
    <caption class="sr-only">Models</caption>
    <thead><tr>
      <th scope="col">API model name</th><th scope="col">Status</th><th scope="col">Replicas healthy / wanted</th>
      <th scope="col">Partition</th><th scope="col">Endpoints</th><th scope="col">Last refused job</th>
    </tr></thead>
    <tbody>${rows.map((m) => {
      const s = m.spec;
      return html`<tr key=${m.id}>
        <th scope="row"><${Link} href=${`/deployments/${m.id}`}>${m.name}<//>
          ${m.description && html`<div class="muted small">${m.description}</div>`}</th>
        <td><${Badge} value=${m.status} />${s && !s.enabled ? html` <${Badge} value="paused" />` : ''}</td>
        <td class="num">${s ? `${healthyCount(m.replicas)} / ${s.autoscale ? `${s.autoscale.min_replicas}–${s.autoscale.max_replicas}` : s.replicas}` : html`<span class="muted">not managed</span>`}</td>
        <td>${s ? s.partition : '—'}</td>
        <td>${m.endpoints.length ? html`<ul class="plain mono small">${m.endpoints.map((e) => html`<li key=${e}>${e}</li>`)}</ul>` : html`<span class="muted">none</span>`}</td>
        <td>${s && s.provision_error ? html`<span class="error-text">${s.provision_error.message}</span>` : html`<span class="muted">—</span>`}</td>
      </tr>`;
    })}</tbody>
  </table></div>`;
}

export function Deployments({ loc }) {
  const session = useSession();
  const settings = useResource(() => api.get('/settings/slurm'), ['settings', 'provisioner']);
  const models = useResource(loadModels, ['models', 'managed', 'replicas']);
  const [saved, setSaved] = useState(null);
  const sheetOpen = loc.search.get('slurm') === '1';
  const close = () => navigate('/deployments');
  const actions = can(session, 'deployments.launch') && html`<${Link} class="button primary" href="/deployments/new">New deployment<//>`;
  return html`<${Layout} title="Deployments" path=${loc.path} actions=${actions}>
    <div role="status" class="flash">${saved && html`<p class="ok-note">${saved}</p>`}</div>
    <${SlurmCard} settings=${settings.data} error=${settings.error} manage=${can(session, 'settings.slurm')} />
    <section class="card" aria-labelledby="models-h">
      <div class="card-head"><h2 id="models-h">Models</h2></div>
      <${ErrorNote} err=${models.error} />
      ${models.data ? html`<${ModelsTable} rows=${models.data} />` : !models.error && html`<p class="muted">Loading…</p>`}
    </section>
    ${sheetOpen && settings.data && html`<${SlurmSheet} settings=${settings.data} initialTab=${loc.search.get('tab')}
      onClose=${close} onSaved=${() => { setSaved('Slurm settings saved. The provisioner picks them up on its next pass; nothing was launched.'); settings.reload(); close(); }} />`}
  <//>`;
}
