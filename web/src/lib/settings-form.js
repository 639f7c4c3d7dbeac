// The Slurm sheet's form values ↔ the PUT /api/v1/settings/slurm document.
// Secrets are never in the page: the GET answer has the mask "********". A
// secret's field is empty at first: left empty it is sent as the mask (the
// server keeps the stored value), typed it is sent as typed, and its "clear"
// box sends null. Everything else is checked by the server.
// PUT replaces the whole document, so the form keeps the GET answer it started from (`saved`) and toBody
// sends back every key of it, shown in the sheet or not (a newer server's too), with the sheet's own
// fields laid over it: a Save never drops a setting the sheet does not show.

export const MASK = '********';

const str = (v) => (v == null ? '' : String(v));
const orNull = (v) => (v.trim() === '' ? null : v.trim());

/** How obleth gets the Slurm JWT (settings `token_source`; docs/operations.md, "A JWT that stays fresh"). */
export const TOKEN_SOURCES = [['static', 'Static token'], ['key_file', 'Key file'], ['command', 'Command']];
/** slurmctld's EnforcePartLimits as Cluster defaults give it; '' is null: unknown. */
export const ENFORCE_PART_LIMITS = ['', 'NO', 'ANY', 'ALL'];

/** Form values from a GET answer. A first setup (nothing saved yet) starts with Slurm enabled. */
export function fromSettings(s) {
  const d = s.defaults || {};
  const env = d.environment || {};
  return {
    saved: s,
    enabled: s.enabled === true || !(s.url || s.socket),
    transport: s.socket ? 'socket' : 'url',
    url: str(s.url), socket: str(s.socket), user: str(s.user),
    token: { value: '', clear: false, set: s.token_set === true },
    verify: s.verify !== false, ca_file: str(s.ca_file),
    api_version: str(s.api_version || 'auto'), timeout: str(s.timeout ?? 10),
    token_source: str(s.token_source || 'static'), token_key_file: str(s.token_key_file),
    token_command: str(s.token_command), token_lifespan: str(s.token_lifespan),
    defaults: {
      model_cache_dir: str(d.model_cache_dir), image_dir: str(d.image_dir), log_dir: str(d.log_dir),
      hf_token_path: str(d.hf_token_path),
      modules: (d.modules || []).join('\n'),
      partition: str(d.partition), account: str(d.account), qos: str(d.qos),
      hf_token: { value: '', clear: false, set: d.hf_token_set === true },
      port_from: str(d.port_range?.[0]), port_to: str(d.port_range?.[1]),
      environment: Object.keys(env).sort().map((k) => `${k}=${env[k]}`).join('\n'),
      user_groups: (d.user_groups || []).join('\n'),
      enforce_part_limits: str(d.enforce_part_limits),
    },
  };
}

const lines = (v) => v.split('\n').map((m) => m.trim()).filter(Boolean);

function secret(f) {
  if (f.clear) return null;
  if (f.value !== '') return f.value;
  return MASK; // left unchanged: the server keeps the stored value (or none)
}

function num(v, field, errors) {
  const t = v.trim();
  if (t === '') return null;
  const n = Number(t);
  if (!Number.isFinite(n)) { errors.push({ field, message: `${field}: not a number` }); return null; }
  return n;
}

/** The PUT body, or {errors} for what the widgets themselves cannot hold (the server checks the rest). */
export function toBody(f) {
  const errors = [];
  const d = f.defaults;
  const env = {};
  d.environment.split('\n').forEach((line, i) => {
    const l = line.trim();
    if (!l) return;
    const eq = l.indexOf('=');
    if (eq <= 0) { errors.push({ field: 'defaults.environment', message: `line ${i + 1}: write NAME=value` }); return; }
    env[l.slice(0, eq).trim()] = l.slice(eq + 1);
  });
  const from = num(d.port_from, 'defaults.port_range', errors);
  const to = num(d.port_to, 'defaults.port_range', errors);
  if ((from == null) !== (to == null)) errors.push({ field: 'defaults.port_range', message: 'give both ends of the port range, or neither' });
  const saved = f.saved || {};
  const groups = lines(d.user_groups);
  const body = {
    ...saved,
    enabled: f.enabled,
    url: f.transport === 'url' ? orNull(f.url) : null,
    socket: f.transport === 'socket' ? orNull(f.socket) : null,
    user: orNull(f.user),
    token: secret(f.token),
    verify: f.verify,
    ca_file: orNull(f.ca_file),
    api_version: f.api_version.trim() || 'auto',
    timeout: num(f.timeout, 'timeout', errors) ?? 10,
    token_source: f.token_source || 'static',
    token_key_file: orNull(f.token_key_file),
    token_command: orNull(f.token_command),
    token_lifespan: num(f.token_lifespan, 'token_lifespan', errors),
    defaults: {
      ...saved.defaults,
      model_cache_dir: orNull(d.model_cache_dir), image_dir: orNull(d.image_dir), log_dir: orNull(d.log_dir),
      hf_token_path: orNull(d.hf_token_path),
      modules: lines(d.modules),
      partition: orNull(d.partition), account: orNull(d.account), qos: orNull(d.qos),
      hf_token: secret(d.hf_token),
      environment: env,
      user_groups: groups.length ? groups : null, // none typed: the host's group database (NSS)
      enforce_part_limits: d.enforce_part_limits || null,
    },
  };
  if (from != null && to != null) body.defaults.port_range = [from, to];
  else delete body.defaults.port_range; // both ends empty: the server's default range
  return errors.length ? { errors } : { body };
}

/** The body for POST /settings/slurm/test: the connection fields as typed (the token only when typed or cleared). */
export function toTestBody(f) {
  const b = { user: orNull(f.user), verify: f.verify, ca_file: orNull(f.ca_file), api_version: f.api_version.trim() || 'auto',
    token_source: f.token_source || 'static', token_key_file: orNull(f.token_key_file), token_command: orNull(f.token_command) };
  const life = Number(f.token_lifespan.trim());
  if (f.token_lifespan.trim() !== '' && Number.isFinite(life)) b.token_lifespan = life;
  if (f.transport === 'url') b.url = orNull(f.url); else b.socket = orNull(f.socket);
  if (f.token.clear) b.token = null;
  else if (f.token.value !== '') b.token = f.token.value;
  for (const k of Object.keys(b)) if (b[k] === null && k !== 'token') delete b[k];
  return b;
}
