// The Slurm card on Deployments: "Set up Slurm" until a connection is saved,
// then "Slurm connection" with whether it is enabled and reachable, the API
// version, the JWT's expiry, and the provisioner's check-in and failing passes.
import { useEffect, useState } from 'preact/hooks';
import { html } from '../html.js';
import { api } from '../api.js';
import { Link } from '../router.js';
import { useNow } from '../live.js';
import { jwtStatus, errorWords, provisionerStatus, leaseWords, tokenSourceWords, policyErrors } from '../lib/slurm.js';
import { timestamp } from '../lib/format.js';
import { Item, ErrorNote } from './notice.js';

/** True once a connection has been saved (a URL or a socket). */
export function isSetUp(s) {
  return !!(s && (s.url || s.socket));
}

export function SlurmCard({ settings, error, manage = true }) {
  const now = useNow(5);
  const [ping, setPing] = useState(null);
  const [pinging, setPinging] = useState(false);
  const setUp = isSetUp(settings);
  const check = async () => {
    if (!manage || !setUp || !settings.enabled) { setPing(null); return; }
    if (pinging) return;
    setPinging(true);
    try { setPing(await api.post('/settings/slurm/test', {})); } catch (e) { setPing({ error: { code: 'error', message: e.message } }); }
    setPinging(false);
  };
  // ping when the saved connection changes (a "settings" event refetches them, so updated_at moves),
  // not on every provisioner check-in
  useEffect(() => { check(); }, [settings && settings.updated_at, setUp, manage]);

  if (error) return html`<section class="card slurm-card" aria-labelledby="slurm-h"><h2 id="slurm-h">Slurm</h2><${ErrorNote} err=${error} /></section>`;
  if (!settings) return html`<section class="card slurm-card" aria-labelledby="slurm-h" aria-busy="true"><h2 id="slurm-h">Slurm</h2><p class="muted">Loading…</p></section>`;

  const th = settings.thresholds || {};
  const prov = provisionerStatus(settings.provisioner, now, th.provisioner_stale);
  const jwt = jwtStatus(settings.token_expires_at, now, settings.token_set, th.token_warn_before);
  const lease = leaseWords(settings.provisioner && settings.provisioner.lease, now);
  const source = tokenSourceWords(settings.token_source);
  const err = ping && errorWords(ping.error);
  let reach = 'not checked';
  if (!settings.enabled) reach = 'not checked (Slurm is off)';
  else if (pinging && !ping) reach = 'checking…';
  else if (ping) reach = ping.ok ? `yes (${ping.latency_ms} ms)` : ping.reachable ? 'answers, but the check failed' : 'no';

  return html`<section class="card slurm-card" aria-labelledby="slurm-h">
    <div class="card-head">
      <h2 id="slurm-h">Slurm</h2>
      ${manage && html`<${Link} class="button primary" href="/deployments?slurm=1">${setUp ? 'Slurm connection' : 'Set up Slurm'}<//>`}
    </div>
    ${!setUp ? html`<p>No slurmrestd connection is saved yet. Set one up to let the provisioner submit jobs;
      saving a connection alone launches nothing.</p>` : html`
    <dl class="facts">
      <${Item} term="Enabled">${settings.enabled ? 'yes' : 'no — the provisioner submits nothing'}<//>
      <${Item} term="slurmrestd"><span class="mono">${settings.url || settings.socket}</span>${settings.user ? ` as ${settings.user}` : ''}<//>
      <${Item} term="Reachable">${reach}<//>
      <${Item} term="API version">${ping && ping.api_version ? ping.api_version : '—'}${ping && ping.release ? ` (Slurm ${ping.release})` : ''}<//>
      <${Item} term="JWT"><span class=${`level-${jwt.level}`}>${jwt.text}</span>${settings.token_expires_at ? html` <span class="muted">(${timestamp(settings.token_expires_at)})</span>` : ''}${source ? html`<br /><span class="muted">${source}</span>` : ''}<//>
      <${Item} term="Provisioner"><span class=${`level-${prov.level}`}>${prov.text}</span>${lease ? html`<br /><span class="muted">${lease}</span>` : ''}<//>
    </dl>
    ${err && html`<p class="error" role="alert"><strong>Connection check: </strong>${err.text} <span class="detail">${err.detail}</span></p>`}
    ${prov.error && html`<p class="error"><strong>Last pass error: </strong><span class="detail">${prov.error}</span></p>`}
    ${policyErrors(settings).map((p) => html`<p class="error" role="status"><strong>Policy file not loaded by ${p.who} (the previous version is used): </strong><span class="mono">${p.where}</span> <span class="detail">${p.message}</span></p>`)}
    <div class="actions start"><button type="button" onClick=${check} disabled=${!settings.enabled} aria-disabled=${pinging ? 'true' : undefined}>Check again</button></div>`}
  </section>`;
}
