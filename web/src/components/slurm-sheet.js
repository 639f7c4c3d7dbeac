// The Slurm sheet (/deployments?slurm=1): a modal dialog with two tabs,
// Connection and Cluster defaults, editing PUT /api/v1/settings/slurm.
// Secrets stay on the server: their fields start empty ("leave unchanged"),
// and clearing one is an explicit box. Test connection pings slurmrestd with
// what is typed. Turning Slurm off while replicas hold jobs asks first (409 confirm).
import { useEffect, useState } from 'preact/hooks';
import { html } from '../html.js';
import { api } from '../api.js';
import { useNow } from '../live.js';
import { fromSettings, toBody, toTestBody, TOKEN_SOURCES, ENFORCE_PART_LIMITS } from '../lib/settings-form.js';
import { errorWords, jwtStatus, provisionerStatus, leaseWords } from '../lib/slurm.js';
import { timestamp, count } from '../lib/format.js';
import { Dialog, ConfirmDialog } from './dialog.js';
import { ErrorNote } from './notice.js';
import { TabList, TabPanel } from './tabs.js';

const TABS = [['connection', 'Connection'], ['defaults', 'Cluster defaults']];
const SOURCE_HELP = {
  static: 'The JWT saved here is sent as it is and never renewed.',
  key_file: 'obleth mints fresh JWTs for the Slurm user from the site\'s key, as scontrol token does.',
  command: 'obleth runs a command that prints a fresh JWT, e.g. scontrol token on a login node.',
};

function Field({ id, label, help, error, children }) {
  return html`<div class=${`field${error ? ' invalid' : ''}`}>
    <label for=${id}>${label}</label>
    ${children}
    ${help && html`<p class="help" id=${`${id}-help`}>${help}</p>`}
    ${error && html`<p class="error" id=${`${id}-err`}>${error}</p>`}
  </div>`;
}

function Text({ id, label, help, value, onInput, error, type = 'text', mono = false, ...rest }) {
  const desc = [help && `${id}-help`, error && `${id}-err`].filter(Boolean).join(' ') || undefined;
  return html`<${Field} id=${id} label=${label} help=${help} error=${error}>
    <input id=${id} type=${type} class=${mono ? 'mono' : undefined} value=${value} spellcheck="false"
      aria-describedby=${desc} aria-invalid=${error ? 'true' : undefined}
      onInput=${(e) => onInput(e.currentTarget.value)} ...${rest} />
  <//>`;
}

/** A text field offering the values the cluster has (a datalist): a value not listed can still be typed. */
function Choice({ id, label, help, value, onInput, error, options }) {
  const desc = [help && `${id}-help`, error && `${id}-err`].filter(Boolean).join(' ') || undefined;
  return html`<${Field} id=${id} label=${label} help=${help} error=${error}>
    <input id=${id} list=${options && options.length ? `${id}-list` : undefined} value=${value} spellcheck="false"
      aria-describedby=${desc} aria-invalid=${error ? 'true' : undefined} onInput=${(e) => onInput(e.currentTarget.value)} />
    ${options && options.length > 0 && html`<datalist id=${`${id}-list`}>${options.map((o) => html`<option key=${o} value=${o} />`)}</datalist>`}
  <//>`;
}

function Area({ id, label, help, value, onInput, error, rows = 3 }) {
  const desc = [help && `${id}-help`, error && `${id}-err`].filter(Boolean).join(' ') || undefined;
  return html`<${Field} id=${id} label=${label} help=${help} error=${error}>
    <textarea id=${id} rows=${rows} class="mono" spellcheck="false" aria-describedby=${desc}
      aria-invalid=${error ? 'true' : undefined} onInput=${(e) => onInput(e.currentTarget.value)}>${value}</textarea>
  <//>`;
}

/** A secret: empty = leave unchanged; typed = replace; the box = clear. */
function Secret({ id, label, value, onChange, error, what }) {
  const status = value.clear ? `The saved ${what} will be cleared.` :
    value.set ? `A ${what} is saved; it is never shown. Leave this empty to keep it unchanged.` : `No ${what} is saved.`;
  return html`<div class=${`field secret${error ? ' invalid' : ''}`}>
    <label for=${id}>${label}</label>
    <input id=${id} type="password" autocomplete="off" spellcheck="false" value=${value.value}
      disabled=${value.clear} placeholder=${value.set ? 'leave unchanged' : ''}
      aria-describedby=${`${id}-help${error ? ` ${id}-err` : ''}`} aria-invalid=${error ? 'true' : undefined}
      onInput=${(e) => onChange({ ...value, value: e.currentTarget.value })} />
    <p class="help" id=${`${id}-help`}>${status}</p>
    ${value.set && html`<label class="check"><input type="checkbox" checked=${value.clear}
      onChange=${(e) => onChange({ ...value, clear: e.currentTarget.checked, value: '' })} /> Clear the saved ${what}</label>`}
    ${error && html`<p class="error" id=${`${id}-err`}>${error}</p>`}
  </div>`;
}

function TestResult({ result, now, warnBefore }) {
  if (!result) return null;
  if (result.failed) return html`<${ErrorNote} err=${result.failed} label="Test connection" />`;
  const err = errorWords(result.error);
  const tok = result.token;
  const jwt = tok && (tok.expires_at != null ? jwtStatus(tok.expires_at, now, true, warnBefore) : { level: 'unknown', text: tok.message || 'no expiry' });
  return html`<div class=${`test-result ${result.ok ? 'ok' : 'bad'}`}>
    <p><strong>${result.ok ? 'Connected.' : 'The test failed.'}</strong>${err ? html` ${err.text}` : ''}</p>
    ${err && err.detail && html`<p class="detail">${err.detail}</p>`}
    <dl class="facts compact">
      ${result.api_version && html`<div class="item"><dt>API version</dt><dd>${result.api_version}</dd></div>`}
      ${result.release && html`<div class="item"><dt>Slurm release</dt><dd>${result.release}</dd></div>`}
      ${result.latency_ms != null && html`<div class="item"><dt>Latency</dt><dd>${result.latency_ms} ms</dd></div>`}
      ${jwt && html`<div class="item"><dt>JWT</dt><dd><span class=${`level-${jwt.level}`}>${jwt.text}</span>${tok.expires_at ? ` (${timestamp(tok.expires_at)})` : ''}</dd></div>`}
    </dl>
  </div>`;
}

export function SlurmSheet({ settings, initialTab = 'connection', onClose, onSaved }) {
  const now = useNow(5);
  const [form, setForm] = useState(() => fromSettings(settings));
  const [tab, setTab] = useState(initialTab === 'defaults' ? 'defaults' : 'connection');
  const [errors, setErrors] = useState({});
  const [saveErr, setSaveErr] = useState(null);
  const [busy, setBusy] = useState(false);
  const [testing, setTesting] = useState(false);
  const [test, setTest] = useState(null);
  const [confirm, setConfirm] = useState(null);
  // the cluster's partitions, the user's accounts and QoS, offered as choices in Cluster defaults
  const [lists, setLists] = useState(null);
  useEffect(() => {
    if (!settings.url && !settings.socket) return;
    api.get('/slurm/resources').then((r) => setLists({
      partitions: (r.partitions || []).map((p) => p.name),
      accounts: r.user_accounts || (r.accounts || []).map((a) => a.name),
      qos: r.user_qos || (r.qos || []).map((q) => q.name),
    }), () => setLists(null));
  }, []); // eslint-disable-line

  // editing a field clears its error (and the "Not saved" note): it spoke of the old value
  const clearErr = (prefix) => {
    setSaveErr(null);
    setErrors((e) => {
      const left = Object.fromEntries(Object.entries(e).filter(([k]) => k !== prefix && !k.startsWith(`${prefix}.`) && !k.startsWith(`${prefix}[`)));
      return Object.keys(left).length === Object.keys(e).length ? e : left;
    });
  };
  const set = (k, v) => { setForm((f) => ({ ...f, [k]: v })); clearErr(k); };
  const setD = (k, v) => {
    setForm((f) => ({ ...f, defaults: { ...f.defaults, [k]: v } }));
    clearErr(`defaults.${k === 'port_from' || k === 'port_to' ? 'port_range' : k}`);
  };

  // buttons stay enabled while busy (a disabled button drops the keyboard focus); a second press does nothing
  const runTest = async () => {
    if (testing) return;
    setTesting(true);
    setTest(null);
    try { setTest(await api.post('/settings/slurm/test', toTestBody(form))); } catch (e) { setTest({ failed: e }); }
    setTesting(false);
  };

  const save = async (confirmed = false) => {
    if (busy) return;
    const r = toBody(form);
    if (r.errors) {
      const byField = {};
      r.errors.forEach((e) => { byField[e.field] = e.message; });
      setErrors(byField);
      setTab(r.errors[0].field.startsWith('defaults.') ? 'defaults' : 'connection');
      return;
    }
    setBusy(true);
    setSaveErr(null);
    setErrors({});
    try {
      const saved = await api.put('/settings/slurm', r.body, confirmed ? { confirm: 'true' } : undefined);
      setConfirm(null);
      onSaved(saved);
    } catch (e) {
      if (e.code === 'confirm') {
        setConfirm({ running: e.body && e.body.error && e.body.error.running, message: e.message });
      } else {
        setSaveErr(e);
        if (e.field) {
          setErrors({ [e.field]: e.message });
          setTab(e.field.startsWith('defaults') ? 'defaults' : 'connection');
        }
      }
    }
    setBusy(false);
  };

  const th = settings.thresholds || {};
  const prov = provisionerStatus(settings.provisioner, now, th.provisioner_stale);
  const lease = leaseWords(settings.provisioner && settings.provisioner.lease, now);
  const d = form.defaults;
  const err = (k) => errors[k];
  // the server names the secret fields "token" / "defaults.hf_token"; port_range errors may name an element
  const portErr = Object.keys(errors).find((k) => k.startsWith('defaults.port_range'));

  return html`<${Dialog} title=${settings.url || settings.socket ? 'Slurm connection' : 'Set up Slurm'} onClose=${onClose} wide=${true}
      initialFocus='[role="tab"][aria-selected="true"]'>
    <form onSubmit=${(e) => { e.preventDefault(); save(false); }} novalidate>
      <${TabList} label="Slurm settings" tabs=${TABS} selected=${tab} onSelect=${setTab} />

      <${TabPanel} name="connection" selected=${tab}>
        <label class="check big"><input type="checkbox" checked=${form.enabled} onChange=${(e) => set('enabled', e.currentTarget.checked)} />
          Slurm enabled (the provisioner submits and keeps jobs running)</label>
        <fieldset class="inline">
          <legend>Connect through</legend>
          <label class="check"><input type="radio" name="transport" checked=${form.transport === 'url'} onChange=${() => set('transport', 'url')} /> URL</label>
          <label class="check"><input type="radio" name="transport" checked=${form.transport === 'socket'} onChange=${() => set('transport', 'socket')} /> Unix socket</label>
        </fieldset>
        <div class="grid2">
          ${form.transport === 'url'
            ? html`<${Text} id="s-url" label="slurmrestd URL" value=${form.url} onInput=${(v) => set('url', v)} error=${err('url')} mono=${true}
                help="e.g. http://slurm-head:6820 or https://…" />`
            : html`<${Text} id="s-socket" label="slurmrestd socket" value=${form.socket} onInput=${(v) => set('socket', v)} error=${err('socket')} mono=${true}
                help="Path of slurmrestd's unix socket" />`}
          <${Text} id="s-user" label="Slurm user" value=${form.user} onInput=${(v) => set('user', v)} error=${err('user')}
            help="Sent as X-SLURM-USER-NAME; jobs run as this user." />
          <${Text} id="s-version" label="API version" value=${form.api_version} onInput=${(v) => set('api_version', v)} error=${err('api_version')}
            help="auto negotiates the newest version both sides know" />
          <${Text} id="s-timeout" label="Timeout (seconds)" value=${form.timeout} onInput=${(v) => set('timeout', v)} error=${err('timeout')} inputmode="numeric" />
          <${Text} id="s-ca" label="CA file" value=${form.ca_file} onInput=${(v) => set('ca_file', v)} error=${err('ca_file')} mono=${true}
            help="PEM bundle for an https URL signed by a private CA" />
        </div>
        <label class="check"><input type="checkbox" checked=${form.verify} onChange=${(e) => set('verify', e.currentTarget.checked)} /> Verify the TLS certificate</label>

        <fieldset class=${`inline${err('token_source') ? ' invalid' : ''}`} aria-describedby="s-source-help">
          <legend>JWT source</legend>
          ${TOKEN_SOURCES.map(([k, label]) => html`<label class="check" key=${k}><input type="radio" name="token_source" value=${k}
            checked=${form.token_source === k} onChange=${() => set('token_source', k)} /> ${label}</label>`)}
        </fieldset>
        <p class="help" id="s-source-help">${SOURCE_HELP[form.token_source] || ''}</p>
        ${err('token_source') && html`<p class="error">${err('token_source')}</p>`}
        <div class="grid2">
          ${form.token_source === 'static' && html`<${Secret} id="s-token" label="JWT" what="JWT" value=${form.token} onChange=${(v) => set('token', v)} error=${err('token')} />`}
          ${form.token_source === 'key_file' && html`<${Text} id="s-keyfile" label="Key file" value=${form.token_key_file} onInput=${(v) => set('token_key_file', v)}
              error=${err('token_key_file')} mono=${true} help="The site's HS256 key, the file slurmctld reads from AuthAltParameters=jwt_key=…, on the provisioner's host and this one." />
            <${Text} id="s-lifespan" label="Token lifespan (seconds)" value=${form.token_lifespan} onInput=${(v) => set('token_lifespan', v)}
              error=${err('token_lifespan')} inputmode="numeric" help="30 to 86400; empty: 1800. A token is renewed once a third of its life is left." />`}
          ${form.token_source === 'command' && html`<${Text} id="s-command" label="Command" value=${form.token_command} onInput=${(v) => set('token_command', v)}
              error=${err('token_command')} mono=${true} help="Run by /bin/sh; prints SLURM_JWT=… or the bare token. Runs only where the daemon has OBLETH_ALLOW_TOKEN_COMMAND=1." />`}
        </div>

        <div class="test-box">
          <button type="button" onClick=${runTest} aria-disabled=${testing ? 'true' : undefined}>${testing ? 'Testing…' : 'Test connection'}</button>
          <div role="status" aria-live="polite" class="test-out">${testing ? 'Testing the connection…' : html`<${TestResult} result=${test} now=${now} warnBefore=${th.token_warn_before} />`}</div>
        </div>
        <p class="muted prov-line"><span class=${`level-${prov.level}`}>${prov.text}</span>${lease ? ` ${lease}` : ''}
          ${prov.error ? html` Last error: <span class="detail">${prov.error}</span>` : ''}</p>
      <//>

      <${TabPanel} name="defaults" selected=${tab}>
        <p class="help">Values recipes refer to, so none of them hard-codes a path.</p>
        <div class="grid2">
          <${Choice} id="d-partition" label="Default partition" value=${d.partition} onInput=${(v) => setD('partition', v)} error=${err('defaults.partition')}
            options=${lists && lists.partitions} help=${lists ? 'The cluster\'s partitions are offered.' : null} />
          <${Choice} id="d-account" label="Default account" value=${d.account} onInput=${(v) => setD('account', v)} error=${err('defaults.account')}
            options=${lists && lists.accounts} help=${lists ? 'The Slurm user\'s accounts are offered.' : null} />
          <${Choice} id="d-qos" label="Default QoS" value=${d.qos} onInput=${(v) => setD('qos', v)} error=${err('defaults.qos')}
            options=${lists && lists.qos} help=${lists ? 'The Slurm user\'s QoS are offered.' : null} />
          <${Text} id="d-cache" label="Model cache directory" value=${d.model_cache_dir} onInput=${(v) => setD('model_cache_dir', v)} error=${err('defaults.model_cache_dir')} mono=${true} />
          <${Text} id="d-images" label="Image directory" value=${d.image_dir} onInput=${(v) => setD('image_dir', v)} error=${err('defaults.image_dir')} mono=${true} />
          <${Text} id="d-logs" label="Job log directory" value=${d.log_dir} onInput=${(v) => setD('log_dir', v)} error=${err('defaults.log_dir')} mono=${true}
            help="Must be writable by the Slurm user on the compute nodes." />
          <${Secret} id="d-hf" label="Hugging Face token" what="Hugging Face token" value=${d.hf_token} onChange=${(v) => setD('hf_token', v)} error=${err('defaults.hf_token')} />
          <${Text} id="d-hf-path" label="Hugging Face token file" value=${d.hf_token_path} onInput=${(v) => setD('hf_token_path', v)} error=${err('defaults.hf_token_path')} mono=${true}
            help="On the cluster, readable only by the job user. Jobs get its path (HF_TOKEN_PATH), never the token." />
          <fieldset class=${`ports${portErr ? ' invalid' : ''}`}>
            <legend>Port range for engines</legend>
            <label for="d-port-from">From</label>
            <input id="d-port-from" inputmode="numeric" value=${d.port_from} onInput=${(e) => setD('port_from', e.currentTarget.value)} />
            <label for="d-port-to">to</label>
            <input id="d-port-to" inputmode="numeric" value=${d.port_to} onInput=${(e) => setD('port_to', e.currentTarget.value)} />
            ${portErr && html`<p class="error">${errors[portErr]}</p>`}
          </fieldset>
        </div>
        <div class="grid2">
          <${Area} id="d-modules" label="Modules to load (one per line)" value=${d.modules} onInput=${(v) => setD('modules', v)} error=${err('defaults.modules')} />
          <${Area} id="d-env" label="Job environment (NAME=value, one per line)" value=${d.environment} onInput=${(v) => setD('environment', v)}
            error=${Object.keys(errors).filter((k) => k.startsWith('defaults.environment')).map((k) => errors[k])[0]} />
          <${Area} id="d-groups" label="Slurm user's groups (user_groups, one per line)" value=${d.user_groups} onInput=${(v) => setD('user_groups', v)}
            error=${Object.keys(errors).filter((k) => k.startsWith('defaults.user_groups')).map((k) => errors[k])[0]}
            help="The groups slurmctld sees for the Slurm user, for partitions with AllowGroups. Empty: this host's group database." />
          <${Field} id="d-epl" label="EnforcePartLimits" error=${err('defaults.enforce_part_limits')}
              help="slurmctld's setting (slurmrestd does not report it): with ANY or ALL a job a partition does not allow is refused at submit, else it pends.">
            <select id="d-epl" value=${d.enforce_part_limits} aria-describedby="d-epl-help" onChange=${(e) => setD('enforce_part_limits', e.currentTarget.value)}>
              ${ENFORCE_PART_LIMITS.map((v) => html`<option key=${v} value=${v}>${v || '(unknown)'}</option>`)}
            </select>
          <//>
        </div>
      <//>

      <${ErrorNote} err=${saveErr} label="Not saved" />
      <div class="actions sheet-actions">
        <p class="help grow">Changes reach the provisioner on its next pass. Saving launches nothing.</p>
        <button type="button" onClick=${onClose}>Cancel</button>
        <button type="submit" class="primary" aria-disabled=${busy ? 'true' : undefined}>${busy ? 'Saving…' : 'Save'}</button>
      </div>
    </form>
    ${confirm && html`<${ConfirmDialog} title="Turn Slurm off?" confirmLabel="Turn Slurm off" busy=${busy}
        onCancel=${() => setConfirm(null)} onConfirm=${() => save(true)}>
      <p><strong>${confirm.running != null ? `${count('replica', confirm.running)} ${confirm.running === 1 ? 'holds' : 'hold'} Slurm jobs right now.` : 'Replicas hold Slurm jobs right now.'}</strong></p>
      <p>The provisioner cancels their jobs on its next pass, and submits nothing until Slurm is turned on again. The deployments and their settings stay.</p>
    <//>`}
  <//>`;
}
