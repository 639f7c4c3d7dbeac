// /deployments/{model_id}: one model's deployment — status, how clients call
// it, the spec's key settings, replicas live (each one's step as the
// provisioner reports it), a chart of load and replicas over the last hours,
// actions, and the launch history with job outcomes.
import { useState } from 'preact/hooks';
import { html } from '../html.js';
import { api } from '../api.js';
import { Link, navigate } from '../router.js';
import { useResource, useNow } from '../live.js';
import { Layout } from '../components/layout.js';
import { Badge, CopyButton, ErrorNote, Item } from '../components/notice.js';
import { ConfirmDialog } from '../components/dialog.js';
import { LoadChart } from '../components/load-chart.js';
import { useSession, can } from '../session.js';
import { progress, stepText, timeLeftText, healthyCount, visibleReplicas, outcomeLevel } from '../lib/replica.js';
import { timestamp, relative, minutes, memory, count } from '../lib/format.js';
import { baseUrl, curlLine } from '../lib/curl.js';

async function loadDeployment(id) {
  const model = await api.get(`/models/${encodeURIComponent(id)}`);
  const [spec, replicas, launches, router] = await Promise.all([
    // a stopped model has no managed spec: not asked for (no 404 in the page's log)
    model.managed ? api.get(`/models/${encodeURIComponent(id)}/managed`).catch((e) => { if (e.status === 404) return null; throw e; }) : null,
    api.get(`/models/${encodeURIComponent(id)}/replicas`),
    api.get('/deployments/launches', { model_id: id, limit: 20 }).catch(() => ({ launches: [] })),
    api.get('/settings/router').catch(() => ({ keyless: false })),
  ]);
  // the recipe's name, when the spec came from one that still exists
  const recipe = spec && spec.recipe_id
    ? await api.get(`/recipes/${encodeURIComponent(spec.recipe_id)}`).catch(() => null) : null;
  // the job's last words, for each shown replica whose job has run
  const logs = {};
  await Promise.all(visibleReplicas(replicas.replicas).filter((r) => r.started_at != null || r.end)
    .map(async (r) => { logs[r.id] = await api.get(`/replicas/${r.id}/log`).catch(() => null); }));
  return { model, spec, recipe, replicas: replicas.replicas, launches: launches.launches, keyless: router.keyless, logs };
}

const STREAM_LABEL = { stderr: 'stderr', stdout: 'stdout' };
const SOURCE_LABEL = { log_dir: 'read from the job log dir', job: 'sent by the job when it exited' };

// What went wrong, in Slurm's words and the engine's own, and what to do (the failures policy's class).
function Failure({ f, slot }) {
  return html`<div class="failure" role="group" aria-label=${`Why replica ${slot} failed`}>
    <p><strong>Why: ${f.title}</strong>${f.doc ? html` — <${Link} href=${f.doc}>Replicas and failures: ${f.title}<//>` : ''}</p>
    <dl class="facts">
      ${f.slurm && html`<${Item} term="Slurm says"><span class="reason">${f.slurm}</span><//>`}
      ${f.engine && html`<${Item} term="The job said"><span class="reason engine-line">${f.engine}</span><//>`}
      <${Item} term="What to do">${f.what}<//>
    </dl>
  </div>`;
}

// The last lines of a replica's job stderr and stdout, and where the whole files are.
function JobOutput({ r, log }) {
  if (!log) return null;
  const open = !!log.failure || ['ended', 'lost', 'unhealthy'].includes(r.state);
  return html`<div class="job-output">
    ${log.failure && html`<${Failure} f=${log.failure} slot=${r.slot} />`}
    ${log.streams.some((st) => st.path || st.lines.length) && html`<details open=${open}>
      <summary>Job output of replica ${r.slot}${r.job_id ? ` (job ${r.job_id})` : ''}: the last ${log.max_lines} lines</summary>
      ${log.streams.map((st) => html`<div key=${st.stream} class="stream">
        <p class="small"><strong>${STREAM_LABEL[st.stream]}</strong>${st.path ? html` — whole file on the cluster: <span class="mono">${st.path}</span>` : ''}
          ${st.source ? html` <span class="muted">(${SOURCE_LABEL[st.source] || st.source}${st.truncated ? ', earlier lines left out' : ''})</span>` : ''}</p>
        ${st.lines.length ? html`<pre class="code log" aria-label=${`Last lines of ${st.stream}, replica ${r.slot}`}><code>${st.lines.join('\n')}</code></pre>`
          : html`<p class="muted small">${st.note ? `Not shown: ${st.note}.` : 'Nothing written yet.'}</p>`}
      </div>`)}
    </details>`}
  </div>`;
}

function Steps({ r }) {
  const p = progress(r);
  return html`<div class="progress">
    <ol class="steps" aria-label=${`Replica ${r.slot} progress`}>
      ${p.steps.map((s) => html`<li key=${s.key} class=${s.status} aria-current=${s.status === 'current' ? 'step' : undefined}>
        <span class="dot" aria-hidden="true"></span><span class="step-label">${s.label}</span>
        <span class="sr-only">${s.status === 'done' ? ' (done)' : s.status === 'current' ? ' (now)' : ''}</span></li>`)}
    </ol>
    ${p.off && html`<p class=${`off ${p.off.state}`}><${Badge} value=${p.off.state} label=${p.off.name} /> ${p.off.why}</p>`}
  </div>`;
}

function slurmCell(r, now) {
  const s = r.slurm || {};
  const end = r.end;
  const lines = [];
  if (s.state) lines.push(html`<span class="mono">${s.state}</span>`);
  else if (end && end.state) lines.push(html`<span class="mono">${end.state}</span>`);
  else if (r.state === 'submitted') lines.push(html`<span class="mono">PENDING</span>`);
  else if (['starting', 'healthy', 'unhealthy'].includes(r.state)) lines.push(html`<span class="mono">RUNNING</span>`);
  const reason = s.reason || (end && end.reason) || r.pending_reason;
  if (reason && reason !== 'None') lines.push(html`<span class="reason">${reason}</span>`);
  if (r.state === 'submitted' && s.start_time && s.estimated) {
    lines.push(html`<span class="muted small">est. start ${relative(s.start_time, now)} (${timestamp(s.start_time)})</span>`);
  }
  if (r.cancel_why && ['ending', 'ended'].includes(r.state)) lines.push(html`<span class="muted small">cancelled by obleth: ${r.cancel_why}</span>`);
  if (r.problem) lines.push(html`<span class="error-text">${r.problem}</span>`);
  return lines.length ? lines.map((l, i) => html`<div key=${i}>${l}</div>`) : html`<span class="muted">—</span>`;
}

// "Job 42" (or "Its job" before Slurm gave it an id), for the Restart question.
function jobOf(r) {
  return r.job_id ? `Job ${r.job_id}` : 'Its job';
}

function Replicas({ data, now, onRestart, busyId, manage }) {
  const rows = visibleReplicas(data.replicas);
  const tl = data.spec && data.spec.time_limit;
  if (rows.length === 0) return html`<p class="empty">No replicas${data.spec && !data.spec.enabled ? ' (paused)' : ''}.</p>`;
  return html`<div class="table-wrap"><table class="replicas">
    <caption class="sr-only">Replicas</caption>
    <thead><tr><th scope="col">Replica</th><th scope="col">Progress</th><th scope="col">Job id</th><th scope="col">Node</th>
      <th scope="col">Endpoint</th><th scope="col">Time left</th><th scope="col">Slurm state / reason</th>
      <th scope="col">Exit code</th><th scope="col"><span class="sr-only">Actions</span></th></tr></thead>
    <tbody>${rows.map((r) => html`<tr key=${r.id} data-state=${r.state}>
      <th scope="row">${r.slot}${r.successor_of ? html`<div class="muted small">successor</div>` : ''}</th>
      <td><${Steps} r=${r} /></td>
      <td class="mono">${r.job_id ?? '—'}</td>
      <td class="mono">${r.node || (r.end && r.end.node) || '—'}</td>
      <td class="mono small">${r.endpoint || '—'}</td>
      <td class="num">${timeLeftText(r, tl, now)}</td>
      <td>${slurmCell(r, now)}</td>
      <td class="num mono">${r.end && r.end.exit_code != null ? `${r.end.exit_code}${r.end.signal ? ` (signal ${r.end.signal})` : ''}` : '—'}</td>
      <td>${!manage || ['ended', 'lost', 'pending', 'ending'].includes(r.state) ? '' : html`<button type="button" class="small"
          aria-disabled=${busyId === r.id || r.restart_requested ? 'true' : undefined}
          onClick=${() => { if (!r.restart_requested) onRestart(r); }}
          aria-label=${r.restart_requested ? `Restart asked for replica ${r.slot}` : `Restart replica ${r.slot}${r.job_id ? ` (job ${r.job_id})` : ''}`}>
          ${r.restart_requested ? 'Restart asked' : 'Restart'}</button>`}</td>
    </tr>`)}</tbody>
  </table></div>
  ${rows.filter((r) => data.logs && data.logs[r.id]).map((r) => html`<${JobOutput} key=${r.id} r=${r} log=${data.logs[r.id]} />`)}`;
}

function History({ launches }) {
  if (!launches.length) return html`<p class="empty">No launches recorded for this model.</p>`;
  return html`<div class="table-wrap"><table class="history">
    <caption class="sr-only">Launch history</caption>
    <thead><tr><th scope="col">Launch</th><th scope="col">When</th><th scope="col">Recipe</th><th scope="col">Settings</th><th scope="col">Job outcomes</th></tr></thead>
    <tbody>${launches.map((l) => {
      const s = l.settings || {};
      return html`<tr key=${l.id}>
        <th scope="row">#${l.id}<div class="muted small">by ${l.created_by}</div></th>
        <td>${timestamp(l.created_at)}</td>
        <td>${l.recipe_id || (s.hf && s.hf.repo_id) || '—'}</td>
        <td class="small">${[s.partition, s.account, s.qos].filter(Boolean).join(' · ')}${s.time_limit ? ` · ${minutes(s.time_limit)}` : ''}${s.replicas != null ? ` · ${count('replica', s.replicas)}` : ''}</td>
        <td>${(l.outcomes || []).length ? html`<ul class="plain small">${l.outcomes.map((o, i) => html`<li key=${i}>
            job <span class="mono">${o.job_id}</span> <${Badge} value=${outcomeLevel(o.state)} label=${o.state} />
            ${o.reason && o.reason !== 'None' ? html` <span class="reason">${o.reason}</span>` : ''}${o.exit_code != null ? ` exit ${o.exit_code}` : ''}${o.node ? ` on ${o.node}` : ''}
            ${o.healthy ? ' (was healthy)' : ' (never healthy)'}</li>`)}</ul>` : html`<span class="muted">none yet</span>`}</td>
      </tr>`;
    })}</tbody>
  </table></div>`;
}

function Settings({ spec, recipe }) {
  const gpus = spec.gpus_per_node ? `${spec.gpus_per_node}${spec.gpu_type ? ` × ${spec.gpu_type}` : ''}` : '0';
  return html`<dl class="facts grid">
    <${Item} term="Partition">${spec.partition}<//>
    <${Item} term="Account">${spec.account || html`<span class="muted">default</span>`}<//>
    <${Item} term="QoS">${spec.qos || html`<span class="muted">default</span>`}<//>
    <${Item} term="Walltime">${minutes(spec.time_limit)}<//>
    <${Item} term="Replicas wanted">${spec.autoscale
      ? `follows the load: ${spec.autoscale.min_replicas} to ${spec.autoscale.max_replicas}, ${count('request', spec.autoscale.target_inflight)} in flight each`
      : spec.replicas}<//>
    <${Item} term="Nodes">${spec.nodes}<//>
    <${Item} term="GPUs per node">${gpus}<//>
    <${Item} term="CPUs per node">${spec.cpus_per_node}<//>
    <${Item} term="Memory per node">${memory(spec.memory_per_node)}<//>
    <${Item} term="Only on nodes with">${spec.constraint || '—'}<//>
    <${Item} term="Avoid nodes">${spec.exclude || '—'}<//>
    <${Item} term="Recipe">${recipe ? html`${recipe.name} <span class="muted small">(${recipe.source || 'recipe'} <span class="mono">${spec.recipe_id}</span>)</span>` : spec.recipe_id || '—'}<//>
    <${Item} term="Health check">${spec.health ? `${spec.health.path} every ${spec.health.interval} s` : '—'}<//>
    ${spec.inputs && Object.keys(spec.inputs).length > 0 && html`<${Item} term="Inputs"><span class="mono small">${Object.entries(spec.inputs).map(([k, v]) => `${k}=${v}`).join(' ')}</span><//>`}
  </dl>`;
}

export function Deployment({ params, loc }) {
  const session = useSession();
  const id = params.modelId;
  const now = useNow(5);
  const res = useResource(() => loadDeployment(id), ['models', 'managed', 'replicas', 'launches', 'settings', 'recipes'], [id], id);
  const [busy, setBusy] = useState(null);
  const [actionErr, setActionErr] = useState(null);
  const [said, setSaid] = useState('');
  const [confirmStop, setConfirmStop] = useState(false);
  const [confirmRestart, setConfirmRestart] = useState(null); // the replica whose Restart asks first
  const [confirmDelete, setConfirmDelete] = useState(false);
  const [confirmAgain, setConfirmAgain] = useState(false);

  // one action at a time; buttons stay enabled while busy (a disabled button drops the keyboard focus)
  const act = async (key, fn, done, { reload = true } = {}) => {
    if (busy) return;
    setBusy(key);
    setActionErr(null);
    try { await fn(); if (done) setSaid(done); if (reload) res.reload(); } catch (e) { setActionErr(e); }
    setBusy(null);
  };

  if (res.error && !res.data) {
    const title = res.error.status === 404 ? 'Model not found' : 'Deployment';
    return html`<${Layout} title=${title} path=${loc.path}><${ErrorNote} err=${res.error} />
      <p><${Link} href="/deployments">Back to Deployments<//></p><//>`;
  }
  if (!res.data) return html`<${Layout} title="Deployment" path=${loc.path}><p class="muted" aria-busy="true">Loading…</p><//>`;

  const { model, spec, replicas, launches, keyless } = res.data;
  const healthy = healthyCount(replicas);
  const lost = replicas.filter((r) => r.state === 'lost');
  const origin = location.origin;
  const curl = curlLine(origin, model.name, keyless);
  const toggle = () => act('pause', async () => {
    await api.put(`/models/${model.id}/managed`, { ...spec, enabled: !spec.enabled });
  }, spec.enabled ? 'Paused: the provisioner cancels the jobs on its next pass.' : 'Resumed: the provisioner submits jobs on its next pass.');

  const last = launches[0];
  const live = replicas.filter((r) => !['ended', 'lost'].includes(r.state)).length;
  const stoppedActions = !spec && html`
    ${last && last.recipe_id && html`<button type="button" onClick=${() => { setActionErr(null); setConfirmAgain(true); }}>Launch again</button>`}
    <button type="button" class="danger" onClick=${() => { setActionErr(null); setConfirmDelete(true); }}>Delete model</button>`;
  const actions = !can(session, 'deployments.manage') ? null : !spec ? stoppedActions : html`
    ${spec.recipe_id && html`<${Link} class="button" href=${`/deployments/${encodeURIComponent(model.id)}?edit=1`}>Edit settings<//>`}
    <button type="button" onClick=${toggle} aria-disabled=${busy === 'pause' ? 'true' : undefined}>${spec.enabled ? 'Pause' : 'Resume'}</button>
    <button type="button" class="danger" onClick=${() => setConfirmStop(true)}>Stop launching</button>`;

  return html`<${Layout} title=${model.name} path=${loc.path} actions=${actions}>
    <p class="crumbs"><${Link} href="/deployments">Deployments<//> › ${model.name}</p>
    <div role="status" class="flash">${said && html`<p class="ok-note">${said}</p>`}</div>
    <${ErrorNote} err=${actionErr} label="That did not work" />
    ${res.error && html`<${ErrorNote} err=${res.error} label="Could not refresh" />`}

    <section class="card" aria-labelledby="sum-h">
      <div class="card-head"><h2 id="sum-h">Status</h2>
        <span><${Badge} value=${model.status} />${spec && !spec.enabled ? html` <${Badge} value="paused" />` : ''}</span></div>
      <p class="summary" role="status">${spec ? `${healthy} of ${count('replica', spec.scaling && spec.scaling.autoscaled ? spec.scaling.desired : spec.replicas)} healthy` : `Stopped: obleth launches nothing for this model${live ? `; ${count('job', live)} still ending` : ''}.`}
        ${spec && !spec.enabled ? ' — paused: no job is submitted until you resume it; clients get 503 meanwhile.'
          : !spec ? (model.status === 'staged' ? ' Clients get 503. Launch it again, or delete it.' : '')
          : model.status === 'staged' && spec.autoscale ? ' — a request wakes it: the router holds it while a replica starts, then answers it or says when to retry (503).'
          : model.status === 'staged' ? ' — clients get 503 until a replica is healthy.' : ''}</p>
      ${spec && spec.autoscale && spec.scaling && html`<p class="scaling">Replicas: ${spec.scaling.current} now, ${spec.scaling.desired} wanted${spec.scaling.reason ? ` — ${spec.scaling.reason}` : ''}.</p>`}
      ${model.description && html`<p class="muted">${model.description}</p>`}
      ${spec && spec.provision_error && html`<div class="refused" role="alert">
        <p><strong>Slurm refused the last job:</strong> <span class="reason">${spec.provision_error.message}</span>
          ${spec.provision_error.field ? html` <span class="muted">(setting: ${spec.provision_error.label || spec.provision_error.field})</span>` : ''}
          ${spec.provision_error.at ? html` <span class="muted small">${timestamp(spec.provision_error.at)}</span>` : ''}
          — <${Link} href="/docs/replicas-and-failures#refused-by-slurm">Replicas and failures: refused by Slurm<//></p>
        <button type="button" aria-disabled=${busy === 'dismiss' ? 'true' : undefined} onClick=${() => act('dismiss',
          () => api.patch(`/models/${model.id}/managed/provision-error`), 'Dismissed: the provisioner tries again on its next pass.')}>Dismiss</button>
      </div>`}
      ${lost.length > 0 && html`<div class="refused" role="alert">
        <p><strong>${count('replica', lost.length)} lost:</strong> ${lost.length === 1 ? 'it' : 'they'} ended too often in a row and ${lost.length === 1 ? 'is' : 'are'} not replaced.${' '}
          <${Link} href="/docs/replicas-and-failures#backoff-and-lost-replicas">Replicas and failures: lost replicas<//></p>
        ${can(session, 'deployments.manage') && html`<button type="button" aria-disabled=${busy === 'clear' ? 'true' : undefined} onClick=${() => act('clear',
          () => api.post(`/models/${model.id}/replicas/clear-lost`), 'Trying once more: the provisioner submits again on its next pass.')}>Try once more</button>`}
      </div>`}
    </section>

    <section class="card" aria-labelledby="load-h">
      <div class="card-head"><h2 id="load-h">Load and replicas</h2></div>
      <${LoadChart} modelId=${model.id} />
    </section>

    <section class="card" aria-labelledby="call-h">
      <div class="card-head"><h2 id="call-h">How clients call it</h2></div>
      <dl class="facts">
        <${Item} term="API model name"><span class="mono">${model.name}</span> <span class="muted small">(the name clients send, also the served model name)</span><//>
        <${Item} term="Base URL"><span class="mono">${baseUrl(origin)}</span> <${CopyButton} text=${baseUrl(origin)} label="Copy base URL" /><//>
      </dl>
      <pre class="code" aria-label="curl example"><code>${curl}</code></pre>
      <${CopyButton} text=${curl} label="Copy curl line" />
      <p class="help">${keyless ? 'Keyless access is on: no client key is needed.' : html`Needs a client key (<${Link} href="/keys">Client keys<//>) in <code>OBLETH_API_KEY</code>.`}</p>
    </section>

    <section class="card" aria-labelledby="rep-h">
      <div class="card-head"><h2 id="rep-h">Replicas</h2></div>
      <${Replicas} data=${res.data} now=${now} busyId=${busy} manage=${can(session, 'deployments.manage')} onRestart=${(r) => { setActionErr(null); setConfirmRestart(r); }} />
      <div class="sr-only" aria-live="polite">${visibleReplicas(replicas).map((r) => `Replica ${r.slot}: ${stepText(r)}. `)}</div>
    </section>

    ${spec && html`<section class="card" aria-labelledby="spec-h">
      <div class="card-head"><h2 id="spec-h">Settings</h2></div>
      <${Settings} spec=${spec} recipe=${res.data.recipe} />
    </section>`}

    <section class="card" aria-labelledby="hist-h">
      <div class="card-head"><h2 id="hist-h">Launch history</h2></div>
      <${History} launches=${launches} />
    </section>

    ${confirmRestart && html`<${ConfirmDialog} title=${`Restart replica ${confirmRestart.slot}?`} confirmLabel="Restart"
        busy=${busy === confirmRestart.id} error=${actionErr && actionErr.message}
        onCancel=${() => setConfirmRestart(null)}
        onConfirm=${() => { const r = confirmRestart; act(r.id, async () => { await api.post(`/replicas/${r.id}/restart`); setConfirmRestart(null); },
          `Restart asked for replica ${r.slot}: its job is cancelled and a new one submitted.`); }}>
      <p>${jobOf(confirmRestart)} is cancelled now and the provisioner submits a new one on its next pass.
        ${confirmRestart.state === 'healthy' ? ` Until the new job is healthy, ${model.name} has ${count('healthy replica', Math.max(0, healthy - 1))}.` : ''}</p>
    <//>`}
    ${confirmAgain && last && html`<${ConfirmDialog} title=${`Launch ${model.name} again?`} confirmLabel="Launch again" busy=${busy === 'again'}
        error=${actionErr && actionErr.message}
        onCancel=${() => setConfirmAgain(false)}
        onConfirm=${() => act('again', async () => { await api.post('/deployments/launch', { model_id: model.id }); setConfirmAgain(false); },
          'Launched again: the provisioner submits its jobs on its next pass.')}>
      <p>With the recipe and settings of launch #${last.id} (${last.recipe_id}${[last.settings.partition, last.settings.account, last.settings.qos].filter(Boolean).map((x) => ` · ${x}`).join('')}${last.settings.time_limit ? ` · ${minutes(last.settings.time_limit)}` : ''}${last.settings.replicas != null ? ` · ${count('replica', last.settings.replicas)}` : ''}). To change them, use New deployment.</p>
    <//>`}
    ${confirmDelete && html`<${ConfirmDialog} title=${`Delete ${model.name}?`} confirmLabel="Delete model" busy=${busy === 'delete'}
        error=${actionErr && actionErr.message}
        onCancel=${() => setConfirmDelete(false)}
        onConfirm=${() => act('delete', async () => { await api.del(`/models/${model.id}`); setConfirmDelete(false);
          navigate('/deployments', { replace: true }); }, null, { reload: false })}>
      <p>The model, its endpoints and its replicas' records are removed; clients asking for ${model.name} get 404. Its launch records are kept.</p>
    <//>`}
    ${confirmStop && html`<${ConfirmDialog} title=${`Stop launching ${model.name}?`} confirmLabel="Stop launching" busy=${busy === 'stop'}
        error=${actionErr && actionErr.message}
        onCancel=${() => setConfirmStop(false)}
        onConfirm=${() => act('stop', async () => { await api.del(`/models/${model.id}/managed`); setConfirmStop(false); },
          'Stopped launching: the provisioner cancels its jobs on its next pass.')}>
      <p>The deployment's spec is removed: the provisioner cancels the jobs of ${count('replica', replicas.filter((r) => !['ended', 'lost'].includes(r.state)).length)} and submits nothing more for this model. The model and its history stay.</p>
    <//>`}
  <//>`;
}
