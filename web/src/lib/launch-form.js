// The New deployment form's pure logic: provenance words, the user's values ↔ the
// request body, the form's settings as YAML text for "Edit as › YAML", and which
// settings a checked YAML changed. Nothing here decides whether a value is valid or
// what Slurm would do: POST /deployments/preview and /check-yaml answer that.

const PROVENANCE = {
  recipe: 'recipe',
  cluster_default: 'cluster default',
  learned: 'Learned from past launches',
  user: 'changed by you',
  builtin: 'built-in',
};

/** The words for a setting's provenance (null: nobody set it). */
export function provenanceText(p) {
  if (p == null) return 'not set';
  return PROVENANCE[p] || p;
}

// kinds and help of the fixed settings (the server's `fields` gives their order and each one's label)
const META = {
  api_model_name: { kind: 'text',
    help: 'The name clients send in "model", and the name forwarded to the server; one recipe can run under several names.' },
  partition: { kind: 'partition' },
  account: { kind: 'account', help: 'Only the accounts the partition takes are offered. Empty: your default account.' },
  qos: { kind: 'qos', help: 'Empty: the association\'s default QoS.' },
  time_limit: { kind: 'text', help: 'Slurm\'s forms: minutes, HH:MM:SS, D-HH, … (shown in minutes).' },
  nodes: { kind: 'number' },
  gpus_per_node: { kind: 'number' },
  gpu_type: { kind: 'text' },
  cpus_per_node: { kind: 'number', help: '0 is the whole node (the job has its nodes to itself).' },
  memory_per_node: { kind: 'number', help: '0 is the whole node.' },
  constraint: { kind: 'text', help: 'Slurm\'s --constraint: features, e.g. a100&ib.' },
  exclude: { kind: 'text', help: 'Slurm\'s --exclude: a node list, e.g. n[1-2].' },
  replicas: { kind: 'number', help: 'A fixed count. Leave it and fill Autoscaling instead to have the replicas follow the load.' },
  'autoscale.min_replicas': { kind: 'number',
    help: 'Any value here makes the replicas follow the load (no fixed count). 0: scale to zero when idle; the next request wakes it.' },
  'autoscale.max_replicas': { kind: 'number', help: 'Needed to autoscale.' },
  'autoscale.target_inflight': { kind: 'number', help: 'Requests in flight and waiting one replica should carry; more adds a replica.' },
  'autoscale.scale_down_after': { kind: 'number', help: 'A replica goes only when the peak load of this window fits the others.' },
  'autoscale.idle_to_zero_after': { kind: 'number', help: 'With Autoscale: at least 0, no request for this long scales to zero.' },
  stdout: { kind: 'text' },
  stderr: { kind: 'text' },
  rollover_margin: { kind: 'number',
    help: 'A successor job starts this long, plus the replica\'s measured start-up time, before the walltime ends.' },
  'health.path': { kind: 'text' },
  'health.interval': { kind: 'number' },
  'health.timeout': { kind: 'number' },
  'health.startup_grace': { kind: 'number' },
  'health.failure_threshold': { kind: 'number' },
};

/**
 * How the form shows one field: {label, kind, help, group, min?, max?}. kind: text | number | partition |
 * account | qos | select | switch; inputDefs: the recipe's `inputs` (their declared type, values, min / max);
 * labels: {field: label} from the preview's `fields` (the server owns the words); hint: the field's `hint`
 * there ({min, max, default, unit, empty}: the server owns the numbers).
 */
export function fieldMeta(field, inputDefs = {}, labels = {}, hint = null) {
  if (field.startsWith('inputs.')) {
    const name = field.slice(7);
    const d = inputDefs[name] || {};
    const kind = d.type === 'enum' ? 'select' : d.type === 'boolean' ? 'switch' : d.type === 'number' || d.type === 'integer' ? 'number' : 'text';
    return { label: name, kind, help: d.description || '', group: 'inputs', values: d.values || [], min: d.min, max: d.max };
  }
  const m = { ...(META[field] || { kind: 'text' }), label: labels[field] || field };
  if (hint) {
    if (hint.min != null) m.min = hint.min;
    if (hint.max != null) m.max = hint.max;
    // a setting a policy fills when it is left empty says the policy's value
    if (hint.empty != null) m.help = `${m.help ? `${m.help} ` : ''}Empty: ${hint.empty}${hint.unit === 'minutes' ? ' min' : ''}.`;
    // autoscale's settings are all empty until one is given: the value an empty one takes then
    else if (field.startsWith('autoscale.') && hint.default != null) {
      m.help = `${m.help ? `${m.help} ` : ''}Empty: ${hint.default}${hint.unit === 'seconds' ? ' s' : ''}.`;
    }
  }
  const group = field.startsWith('health.') ? 'health' : field.startsWith('autoscale.') ? 'autoscale'
    : ['stdout', 'stderr', 'replicas', 'rollover_margin'].includes(field) ? 'run'
      : ['partition', 'account', 'qos', 'time_limit'].includes(field) ? 'where'
        : field === 'api_model_name' ? 'name' : 'resources';
  return { ...m, group };
}

/** What the user typed, as it goes in the request: a number when it reads as one (the server checks it). */
export function typed(kind, raw) {
  if (kind === 'switch') return !!raw;
  if (kind === 'number' && typeof raw === 'string' && /^\s*-?\d+(\.\d+)?\s*$/.test(raw)) return Number(raw);
  return raw;
}

/**
 * The preview / launch body from the source picked and the user's values
 * ({"partition": "debug", "health.path": "/h", "inputs.mode": "ok", "api_model_name": "x"}).
 */
export function requestBody(source, userValues) {
  const body = source.hf ? { hf: source.hf } : { recipe_id: source.recipe_id };
  const values = {};
  for (const [k, v] of Object.entries(userValues)) {
    if (k === 'api_model_name') { body.api_model_name = v; continue; }
    const dot = k.indexOf('.');
    if (dot > 0) {
      const top = k.slice(0, dot);
      values[top] = { ...(values[top] || {}), [k.slice(dot + 1)]: v };
    } else values[k] = v;
  }
  body.values = values;
  return body;
}

function scalar(v) {
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  // a double-quoted JSON string is a valid YAML double-quoted scalar
  return JSON.stringify(String(v));
}

/**
 * The form's settings as YAML text, in form order: fields [{field, value}] from the preview, with the
 * user's values over them. Unset settings are left out; health.* and inputs.* become mappings.
 */
export function toYaml(fields, userValues = {}) {
  const lines = [];
  let section = null;
  for (const f of fields) {
    let v = Object.prototype.hasOwnProperty.call(userValues, f.field) ? userValues[f.field] : f.value;
    if (v == null || v === '') continue;
    // what was typed ("4", "true") as the server read it (4, true): the YAML keeps the setting's type
    if (f.value != null && typeof f.value !== 'string' && typeof v === 'string' && String(f.value) === v.trim()) v = f.value;
    const dot = f.field.indexOf('.');
    if (dot > 0) {
      const top = f.field.slice(0, dot);
      if (section !== top) { lines.push(`${top}:`); section = top; }
      lines.push(`  ${f.field.slice(dot + 1)}: ${scalar(v)}`);
    } else {
      section = null;
      lines.push(`${f.field}: ${scalar(v)}`);
    }
  }
  return lines.join('\n') + '\n';
}

const same = (a, b) => (a == null && b == null) || String(a) === String(b);

/**
 * The user's values after a YAML text checked ok: settings is check-yaml's {field: {value}}, fields the
 * preview's (what the form showed), userValues what the user had changed. A value the YAML changed
 * becomes the user's; one the user had changed stays the user's with the YAML's value; a user's value
 * the YAML left out goes back to its default.
 */
export function valuesFromYaml(settings, fields, userValues) {
  const shown = Object.fromEntries(fields.map((f) => [f.field, f.value]));
  const out = {};
  for (const [field, s] of Object.entries(settings)) {
    const v = s && s.value;
    if (v == null) continue;
    const had = Object.prototype.hasOwnProperty.call(userValues, field);
    if (had || !same(v, shown[field])) out[field] = v;
  }
  return out;
}

/** [{field, from, to}] between two previews' values, for "what changed" after picking a suggestion. */
export function changes(beforeFields, afterFields) {
  const b = Object.fromEntries(beforeFields.map((f) => [f.field, f.value]));
  return afterFields.filter((f) => !same(b[f.field], f.value)).map((f) => ({ field: f.field, from: b[f.field] ?? null, to: f.value }));
}

/** A partition option's words: "fits · 3 of 4 fitting nodes idle" or why not. */
export function partitionText(p) {
  if (!p.available) return p.unavailable_reason || 'not available';
  const idle = `${p.idle_fitting_nodes ?? 0} of ${p.fitting_nodes ?? 0} fitting nodes idle`;
  if (p.can_run && p.fits) return `fits · ${idle}`;
  const why = [...new Set([...(p.errors || []).map((e) => e.message), ...(p.reasons || [])])];
  return `${p.can_run ? 'fits no node now' : 'cannot run this replica'}${why.length ? `: ${why.join('; ')}` : ''} · ${idle}`;
}

/**
 * Editing a deployment: the managed spec's values that differ from what the recipe alone gives (fields:
 * a preview of the recipe with no values) — they show as "changed by you". Paths: health.x and
 * inputs.x are read from spec.health / spec.inputs.
 */
export function specValues(spec, fields) {
  const out = {};
  for (const f of fields) {
    if (f.field === 'api_model_name') continue;
    const dot = f.field.indexOf('.');
    const v = dot > 0 ? (spec[f.field.slice(0, dot)] || {})[f.field.slice(dot + 1)] : spec[f.field];
    if (v != null && v !== '' && !same(v, f.value)) out[f.field] = v;
  }
  return out;
}

/**
 * What Review shows of the request to slurmrestd: its line and body, or, before Slurm is connected
 * (no API version, so no request), a sentence instead of "null" pieces.
 * @returns {{known: true, line: string, body: string} | {known: false, text: string}}
 */
export function slurmRequestView(preview) {
  if (!preview.api_version || preview.slurm_request == null) {
    return { known: false, text: 'The request to slurmrestd is not known until Slurm is connected: its shape depends on the API version slurmrestd speaks.' };
  }
  return { known: true, line: `POST /slurm/${preview.api_version}/job/submit (secrets masked)`, body: JSON.stringify(preview.slurm_request, null, 2) };
}

/** The preview's `placeholders` in words: which parts of the script and request are filled in at submit. */
export function placeholdersText(p) {
  if (!p) return null;
  const note = String(p.note || 'some values are fixed per replica when the provisioner submits it');
  const id = p.model_id === 0 ? 'model id 0 (the model\'s id once launched)' : `model id ${p.model_id}`;
  return `${note.charAt(0).toUpperCase()}${note.slice(1)}. Until then they show ${id}, replica slot ${p.slot}` +
    `${p.nonce ? `, nonce ${p.nonce}` : ''}, and the first port of the port range.`;
}
