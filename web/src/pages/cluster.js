// /cluster: the Slurm cluster as obleth sees it (GET /api/v1/slurm/resources): partitions with
// their limits and who may use them, nodes with state, reason and GPUs free / used per type, and
// obleth's own jobs in the queue with Slurm's pending reason and estimated start. Live: it reloads
// when a provisioner pass reports (the provisioner topic) or replicas change.
import { html } from '../html.js';
import { api } from '../api.js';
import { Link } from '../router.js';
import { useResource, useNow } from '../live.js';
import { Layout } from '../components/layout.js';
import { Badge, ErrorNote } from '../components/notice.js';
import { minutes, memory, relative, timestamp } from '../lib/format.js';

const limit = (v) => (v === 'UNLIMITED' ? 'unlimited' : v == null ? '—' : minutes(v));
const list = (a) => (a && a.length ? a.join(', ') : null);

function who(p) {
  const parts = [];
  if (list(p.allowed_accounts)) parts.push(`accounts ${list(p.allowed_accounts)}`);
  if (list(p.denied_accounts)) parts.push(`not accounts ${list(p.denied_accounts)}`);
  if (list(p.allowed_qos)) parts.push(`QoS ${list(p.allowed_qos)}`);
  if (list(p.denied_qos)) parts.push(`not QoS ${list(p.denied_qos)}`);
  if (list(p.allowed_groups)) parts.push(`groups ${list(p.allowed_groups)}`);
  return parts.length ? parts.join('; ') : 'everyone';
}

function Partitions({ parts }) {
  return html`<div class="table-wrap"><table>
    <caption class="sr-only">Partitions</caption>
    <thead><tr><th scope="col">Partition</th><th scope="col">State</th><th scope="col">Nodes</th><th scope="col">Max time</th>
      <th scope="col">Default time</th><th scope="col">Max nodes per job</th><th scope="col">Who may use it</th></tr></thead>
    <tbody>${parts.map((p) => html`<tr key=${p.name}>
      <th scope="row">${p.name}${p.default ? html` <span class="muted small">(default)</span>` : ''}</th>
      <td class="mono">${p.state || '—'}</td>
      <td class="mono small">${p.nodes || '—'}${p.total_nodes != null ? html` <span class="muted">(${p.total_nodes})</span>` : ''}</td>
      <td>${limit(p.max_time)}</td><td>${limit(p.default_time)}</td>
      <td>${p.max_nodes === 'UNLIMITED' ? 'unlimited' : p.max_nodes ?? '—'}</td>
      <td class="small">${who(p)}</td>
    </tr>`)}</tbody>
  </table></div>`;
}

function gpuText(g) {
  return `${g.type || 'gpu'}: ${g.used} used, ${g.free} free of ${g.total}`;
}

function Nodes({ nodes }) {
  return html`<div class="table-wrap"><table>
    <caption class="sr-only">Nodes</caption>
    <thead><tr><th scope="col">Node</th><th scope="col">State</th><th scope="col">Reason</th><th scope="col">CPUs in use</th>
      <th scope="col">Memory in use</th><th scope="col">GPUs</th><th scope="col">Partitions</th></tr></thead>
    <tbody>${nodes.map((x) => {
      const st = x.state || {};
      const flags = st.flags && st.flags.length ? `+${st.flags.join('+')}` : '';
      return html`<tr key=${x.name}>
        <th scope="row" class="mono">${x.name}</th>
        <td class="mono">${st.base || '—'}${flags}</td>
        <td class="small">${x.reason || html`<span class="muted">—</span>`}</td>
        <td class="num">${x.alloc_cpus ?? '—'} / ${x.cpus ?? '—'}</td>
        <td class="num">${x.alloc_memory === 0 ? "0 MiB" : memory(x.alloc_memory)} / ${memory(x.memory)}</td>
        <td>${x.gpus_by_type && x.gpus_by_type.length ? html`<ul class="plain small">${x.gpus_by_type.map((g) => html`<li key=${g.type}>${gpuText(g)}</li>`)}</ul>`
          : html`<span class="muted">none</span>`}</td>
        <td class="small">${(x.partitions || []).join(', ') || '—'}</td>
      </tr>`;
    })}</tbody>
  </table></div>`;
}

function Jobs({ jobs, now }) {
  if (!jobs) return html`<p class="muted">Not known: Slurm did not list the jobs.</p>`;
  if (!jobs.length) return html`<p class="empty">obleth has no job in the queue or running.</p>`;
  return html`<div class="table-wrap"><table>
    <caption class="sr-only">obleth's jobs</caption>
    <thead><tr><th scope="col">Job id</th><th scope="col">Model</th><th scope="col">State</th><th scope="col">Reason</th>
      <th scope="col">Partition</th><th scope="col">Nodes</th><th scope="col">Start</th></tr></thead>
    <tbody>${jobs.map((j) => html`<tr key=${j.job_id}>
      <th scope="row" class="mono">${j.job_id}</th>
      <td>${j.model_name ? html`<${Link} href=${`/deployments/${j.model_id}`}>${j.model_name}<//>` : `model ${j.model_id}`} <span class="muted small">replica ${j.slot}</span></td>
      <td class="mono">${j.state}</td>
      <td class="reason">${j.reason || '—'}</td>
      <td>${j.partition || '—'}</td>
      <td class="mono small">${j.nodes || '—'}</td>
      <td class="small">${j.start_time ? html`${j.estimated ? 'est. ' : ''}${relative(j.start_time, now)} <span class="muted">(${timestamp(j.start_time)})</span>`
        : html`<span class="muted">${j.state === 'PENDING' ? 'no estimate yet' : '—'}</span>`}</td>
    </tr>`)}</tbody>
  </table></div>`;
}

export function Cluster({ loc }) {
  const now = useNow(5);
  const res = useResource(() => api.get('/slurm/resources'), ['provisioner', 'replicas', 'settings']);
  const d = res.data;
  return html`<${Layout} title="Cluster" path=${loc.path}>
    ${res.error && html`<${ErrorNote} err=${res.error} label=${d ? 'Could not refresh' : 'Could not read the cluster'} />`}
    ${res.error && res.error.code === 'not_configured' && html`<p><${Link} href="/deployments?slurm=1">Set up Slurm<//></p>`}
    ${!d && !res.error && html`<p class="muted" aria-busy="true">Loading…</p>`}
    ${d && html`
      <p class="muted small" role="status">As Slurm showed it ${relative(d.fetched_at, now)}${d.api_version ? ` (slurmrestd ${d.api_version})` : ''}${d.user ? `, for user ${d.user}` : ''}.</p>
      ${d.warnings && d.warnings.length > 0 && html`<ul class="plain small">${d.warnings.map((w, i) => html`<li key=${i}><${Badge} value="warn" label="not read" /> ${w}</li>`)}</ul>`}
      <section class="card" aria-labelledby="jobs-h"><div class="card-head"><h2 id="jobs-h">obleth's jobs</h2></div>
        <${Jobs} jobs=${d.jobs} now=${now} /></section>
      <section class="card" aria-labelledby="nodes-h"><div class="card-head"><h2 id="nodes-h">Nodes</h2></div>
        <${Nodes} nodes=${d.nodes} /></section>
      <section class="card" aria-labelledby="parts-h"><div class="card-head"><h2 id="parts-h">Partitions</h2></div>
        <${Partitions} parts=${d.partitions} /></section>`}
  <//>`;
}
