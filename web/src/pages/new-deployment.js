// /deployments/new: New deployment in three steps — 1. Pick what to run (Saved / Library recipes, or a
// Hugging Face repo and an engine that can run it), 2. Where and how it runs (one form with every
// setting, each saying where its value came from; Edit as › YAML), 3. Review (the job script, the
// slurmrestd request, warnings, Also save as a recipe) and Launch → the deployment page.
// The server decides; the page shows: every value, error, partition and suggestion comes from
// POST /deployments/preview (debounced as the user types) and /deployments/check-yaml.
import { useEffect, useRef, useState } from 'preact/hooks';
import { html } from '../html.js';
import { api } from '../api.js';
import { Link, navigate } from '../router.js';
import { Layout } from '../components/layout.js';
import { CopyButton, ErrorNote } from '../components/notice.js';
import { TabList, TabPanel } from '../components/tabs.js';
import { ConfirmDialog } from '../components/dialog.js';
import { fieldMeta, provenanceText, requestBody, typed, toYaml, valuesFromYaml, changes, partitionText,
  slurmRequestView, placeholdersText } from '../lib/launch-form.js';
import { minutes, count } from '../lib/format.js';

const ENGINE_NAMES = { vllm: 'vLLM', sglang: 'SGLang', llamacpp: 'llama.cpp', ollama: 'Ollama', smoke: 'smoke' };
const engineName = (e) => ENGINE_NAMES[e] || e;
const fid = (field) => `f-${field.replace(/\./g, '-')}`;

function size(bytes) {
  if (bytes == null) return '';
  const gb = bytes / 1e9;
  return gb >= 1 ? `${gb.toFixed(1)} GB` : `${Math.round(bytes / 1e6)} MB`;
}

// ---------------------------------------------------------------- step 1

function RecipeList({ title, recipes, onPick, empty, onRename = null, onDelete = null }) {
  return html`<div>
    ${recipes.length === 0 ? html`<p class="empty">${empty}</p>` : html`
    <ul class="recipes plain" aria-label=${`${title} recipes`}>${recipes.map((r) => html`<li key=${r.id} class="recipe">
      <div class="grow"><strong>${r.name || r.id}</strong>${r.engine ? html` <span class="badge muted">${engineName(r.engine)}</span>` : ''}
        ${r.source === 'saved' ? html` <span class="muted small mono">${r.id}</span>` : ''}
        <p class="help">${r.description || ''}</p></div>
      ${onRename && html`<button type="button" class="small" onClick=${() => onRename(r)} aria-label=${`Rename ${r.name || r.id}`}>Rename</button>`}
      ${onDelete && html`<button type="button" class="small danger" onClick=${() => onDelete(r)} aria-label=${`Delete ${r.name || r.id}`}>Delete</button>`}
      <button type="button" onClick=${() => onPick({ recipe_id: r.id }, r.name)} aria-label=${`Use ${r.name || r.id}`}>Use</button>
    </li>`)}</ul>`}
  </div>`;
}

// Rename or delete a saved recipe (PUT / DELETE /recipes/{id}); asks first, says what it did.
function SavedActions({ act, onDone }) {
  const [name, setName] = useState(act.kind === 'rename' ? (act.recipe.name || act.recipe.id) : '');
  const [busy, setBusy] = useState(false);
  const [err, setErr] = useState(null);
  const r = act.recipe;
  const go = async () => {
    if (busy) return;
    setBusy(true); setErr(null);
    try {
      if (act.kind === 'delete') await api.del(`/recipes/${encodeURIComponent(r.id)}`);
      else {
        const cur = await api.get(`/recipes/${encodeURIComponent(r.id)}`);
        await api.put(`/recipes/${encodeURIComponent(r.id)}`, { ...cur.recipe, name: name.trim() });
      }
      onDone(act.kind === 'delete' ? `Deleted the saved recipe ${r.name || r.id}.` : `Renamed ${r.id} to ${name.trim()}.`);
    } catch (e) { setErr(e); setBusy(false); }
  };
  if (act.kind === 'delete') {
    return html`<${ConfirmDialog} title=${`Delete the saved recipe ${r.name || r.id}?`} confirmLabel="Delete" busy=${busy}
        error=${err && err.message} onCancel=${() => onDone(null)} onConfirm=${go}>
      <p>Deployments launched from it keep running; it is no longer offered under Saved.</p>
    <//>`;
  }
  return html`<${ConfirmDialog} title=${`Rename ${r.name || r.id}`} confirmLabel="Rename" busy=${busy} danger=${false}
      error=${err && err.message} onCancel=${() => onDone(null)} onConfirm=${go}>
    <div class="field"><label for="rn-name">Name</label>
      <input id="rn-name" value=${name} onInput=${(e) => setName(e.target.value)} /></div>
    <p class="help">The id <span class="mono">${r.id}</span> stays.</p>
  <//>`;
}

function FromHub({ onPick }) {
  const [repo, setRepo] = useState('');
  const [revision, setRevision] = useState('');
  const [busy, setBusy] = useState(false);
  const [err, setErr] = useState(null);
  const [info, setInfo] = useState(null);
  const [picked, setPicked] = useState({});
  const read = async (e) => {
    e.preventDefault();
    setBusy(true); setErr(null); setInfo(null);
    try {
      setInfo(await api.post('/hf/inspect', { repo_id: repo.trim(), ...(revision.trim() ? { revision: revision.trim() } : {}) }));
    } catch (x) { setErr(x); }
    setBusy(false);
  };
  return html`<div>
    <p class="help">Enter a repo id: obleth reads the repo and lists the engines that can run it.</p>
    <form class="inline-form" onSubmit=${read}>
      <div class="field"><label for="hf-repo">Repo id</label>
        <input id="hf-repo" value=${repo} onInput=${(e) => setRepo(e.target.value)} placeholder="Qwen/Qwen2.5-7B-Instruct" required /></div>
      <div class="field"><label for="hf-rev">Revision</label>
        <input id="hf-rev" value=${revision} onInput=${(e) => setRevision(e.target.value)} placeholder="main" /></div>
      <button type="submit" aria-disabled=${busy ? 'true' : undefined}>${busy ? 'Reading…' : 'Read the repo'}</button>
    </form>
    ${err && (err.code === 'gated_no_token' ? html`<div class="error" role="alert"><p>${err.message}</p>
        <p>The token is set on the Slurm sheet's <${Link} href="/deployments?slurm=1&tab=defaults">Cluster defaults<//> tab.</p></div>`
    : html`<${ErrorNote} err=${err} />`)}
    ${info && html`<div class="hf-info">
      <p><strong>${info.repo_id}</strong> <span class="muted small">at ${String(info.revision || '').slice(0, 12)}</span>
        ${info.parameters ? ` · ${info.parameters} parameters` : ''} · formats: ${(info.formats || []).join(', ') || '—'}</p>
      ${(info.notes || []).map((n, i) => html`<p key=${i} class="help">${typeof n === 'string' ? n : n.message}</p>`)}
      ${(info.engines || []).length === 0 ? html`<p class="empty">No engine obleth knows can run this repo.</p>` : html`
      <ul class="plain engines" aria-label="Engines that can run it">${info.engines.map((en) => {
        const choices = en.choices || [];
        // the engine's preselected choice: `default` is its 1-based index
        const dflt = typeof en.default === 'number' ? choices[en.default - 1] : choices.find((x) => x.id === en.default);
        const chosen = picked[en.engine] || (dflt && dflt.id) || (choices[0] && choices[0].id);
        const c = choices.find((x) => x.id === chosen) || choices[0] || {};
        const est = c.prefill && c.prefill.gpu_estimate;
        return html`<li key=${en.engine} class="recipe">
          <div class="grow"><strong>${engineName(en.engine)}</strong> <span class="muted small">recipe ${en.recipe}</span>
            ${choices.length > 1 && html`<div class="field"><label for=${`hf-c-${en.engine}`}>${engineName(en.engine)} choice</label>
              <select id=${`hf-c-${en.engine}`} value=${chosen} onChange=${(e) => setPicked({ ...picked, [en.engine]: e.target.value })}>
                ${choices.map((x) => html`<option key=${x.id} value=${x.id}>${x.label}${x.size_bytes ? ` (${size(x.size_bytes)})` : ''}${x.supported === false ? ' — not supported' : ''}</option>`)}
              </select></div>`}
            <p class="help">${c.label ? `${c.label}${c.size_bytes ? ` · ${size(c.size_bytes)}` : ''}` : ''}
              ${c.prefill ? ` · GPU estimate: ${c.prefill.gpus_per_node ?? 0} GPU${c.prefill.gpus_per_node === 1 ? '' : 's'} per node${c.prefill.gpu_type ? ` (${c.prefill.gpu_type})` : ''}` : ''}
              ${est && est.need_gib != null ? ` (about ${est.need_gib} GiB of GPU memory)` : ''}</p>
            ${est && (est.notes || []).map((n, i) => html`<p key=${i} class="help">${n}</p>`)}
          </div>
          <button type="button" aria-label=${`Use ${engineName(en.engine)}`}
            onClick=${() => onPick({ hf: { repo_id: info.repo_id, ...(revision.trim() ? { revision: revision.trim() } : {}), engine: en.engine, ...(c.id ? { choice: c.id } : {}) } },
              `${info.repo_id} with ${engineName(en.engine)}`)}>Use</button>
        </li>`;
      })}</ul>`}
    </div>`}
  </div>`;
}

const PICK_TABS = [['saved', 'Saved'], ['library', 'Library'], ['hf', 'From Hugging Face']];

/** Step 1: three choices as tabs — Saved recipes, Library recipes, From Hugging Face. It opens on Saved
 * when there are saved recipes, else on Library. Every panel stays in the page (what is typed stays). */
function Pick({ onPick, tab, setTab }) {
  const [recipes, setRecipes] = useState(null);
  const [err, setErr] = useState(null);
  const [savedAct, setSavedAct] = useState(null); // {kind: 'rename' | 'delete', recipe}
  const [savedSaid, setSavedSaid] = useState('');
  const loadRecipes = () => api.get('/recipes').then((r) => setRecipes(r.recipes), setErr);
  useEffect(() => { loadRecipes(); }, []); // eslint-disable-line
  const saved = (recipes || []).filter((r) => r.source === 'saved');
  const library = (recipes || []).filter((r) => r.source !== 'saved');
  // the opening tab is chosen once, when the list first arrives: deleting the last saved recipe must
  // not switch to Library under the user (and hide the Saved tab's "Deleted ..." note with it)
  useEffect(() => { if (recipes && !tab) setTab(saved.length ? 'saved' : 'library'); }, [recipes]); // eslint-disable-line
  const p = 'pick-';
  // the opening tab depends on whether recipes are saved: choose it once the list is here, so it
  // does not switch from Library to Saved under the user (or a keyboard) a moment after the page opens
  if (!recipes && !err && !tab) {
    return html`<section class="card pick" aria-labelledby="pick-h" aria-busy="true">
      <h2 id="pick-h">Pick what to run</h2><p class="muted">Loading…</p></section>`;
  }
  const shown = tab || (saved.length ? 'saved' : 'library');
  return html`<section class="card pick" aria-labelledby="pick-h">
    <h2 id="pick-h">Pick what to run</h2>
    <${ErrorNote} err=${err} />
    <${TabList} label="What to run" tabs=${PICK_TABS} selected=${shown} onSelect=${setTab} prefix=${p} />
    <${TabPanel} name="saved" selected=${shown} prefix=${p}>
      <p role="status" class=${savedSaid ? 'ok-note' : ''}>${savedSaid}</p>
      ${recipes ? html`<${RecipeList} title="Saved" recipes=${saved} onPick=${onPick}
        onRename=${(r) => { setSavedSaid(''); setSavedAct({ kind: 'rename', recipe: r }); }}
        onDelete=${(r) => { setSavedSaid(''); setSavedAct({ kind: 'delete', recipe: r }); }}
        empty="None yet. Tick “Also save these settings as a recipe” when you launch." />` : html`<p class="muted">Loading…</p>`}
      ${savedAct && html`<${SavedActions} act=${savedAct} onDone=${(said) => { setSavedAct(null); if (said) { setSavedSaid(said); loadRecipes(); } }} />`}
    <//>
    <${TabPanel} name="library" selected=${shown} prefix=${p}>
      ${recipes ? html`<${RecipeList} title="Library" recipes=${library} onPick=${onPick} empty="No library recipes are installed." />`
        : html`<p class="muted">Loading…</p>`}
    <//>
    <${TabPanel} name="hf" selected=${shown} prefix=${p}><${FromHub} onPick=${onPick} /><//>
  </section>`;
}

// ---------------------------------------------------------------- step 2

/** The preview of source + values, asked again 300 ms after the last change; the last answer stays shown. */
function usePreview(source, body, values = {}) {
  const [state, setState] = useState({ preview: null, error: null, pending: true, seen: {} });
  const seq = useRef(0);
  const key = JSON.stringify(body);
  const now = useRef(values);
  now.current = values;
  const run = async () => {
    const n = ++seq.current;
    const sent = now.current; // the values this preview answers for (its field errors are about them)
    setState((s) => ({ ...s, pending: true }));
    try {
      const p = await api.post('/deployments/preview', body);
      if (n === seq.current) setState({ preview: p, error: null, pending: false, seen: sent });
      return p;
    } catch (e) {
      if (n === seq.current) setState((s) => ({ ...s, error: e, pending: false }));
      return null;
    }
  };
  useEffect(() => {
    const t = setTimeout(run, state.preview ? 300 : 0);
    return () => clearTimeout(t);
  }, [key]); // eslint-disable-line
  return { ...state, now: run };
}

function Provenance({ id, f, onReset, emptied = false }) {
  // emptied: the field is blank and the server used another value: say whose, and that it is used
  return html`<div class="prov" id=${`${id}-prov`}>
    <span class=${`badge prov-${f.provenance || 'none'}`}>${emptied ? `empty: the ${provenanceText(f.provenance)}'s ${f.value} is used` : provenanceText(f.provenance)}</span>
    ${f.provenance === 'user' && onReset && html`<button type="button" class="reset" onClick=${onReset}
      aria-label=${`Use the default for ${f.label || f.field}`}>Use default</button>`}
  </div>`;
}

function Control({ id, f, meta, raw, set, preview, describedBy }) {
  const shown = raw !== undefined ? raw : f.value;
  const common = { id, 'aria-describedby': describedBy, 'aria-invalid': f.error ? 'true' : undefined, readOnly: meta.readOnly || undefined };
  if (meta.kind === 'account' || meta.kind === 'qos') {
    const offered = (meta.kind === 'account' ? preview.accounts_offered : preview.qos_offered) || [];
    const opts = shown && !offered.includes(shown) ? [...offered, shown] : offered;
    return html`<select ...${common} value=${shown || ''} onChange=${(e) => set(e.target.value)}>
      <option value="">${meta.kind === 'account' ? '(your default account)' : '(the association\'s default)'}</option>
      ${opts.map((o) => html`<option key=${o} value=${o}>${o}${offered.includes(o) ? '' : ' — not offered here'}</option>`)}
    </select>`;
  }
  if (meta.kind === 'select') {
    return html`<select ...${common} value=${shown ?? ''} onChange=${(e) => set(e.target.value)}>
      ${shown == null && html`<option value="">(choose)</option>`}
      ${meta.values.map((o) => html`<option key=${o} value=${o}>${o}</option>`)}
    </select>`;
  }
  if (meta.kind === 'switch') {
    return html`<input type="checkbox" role="switch" ...${common} checked=${!!shown} onChange=${(e) => set(e.target.checked)} />`;
  }
  return html`<input ...${common} type="text" inputmode=${meta.kind === 'number' ? 'numeric' : undefined}
    value=${shown ?? ''} placeholder=${raw === '' && f.value != null ? String(f.value) : undefined}
    onInput=${(e) => set(e.target.value)} autocomplete="off" spellcheck="false" />`;
}

function Partitions({ f, preview, raw, set, describedBy }) {
  const shown = raw !== undefined ? raw : f.value;
  const parts = preview.partitions || [];
  const offered = parts.filter((p) => (preview.partitions_offered || []).includes(p.partition));
  const others = parts.filter((p) => !(preview.partitions_offered || []).includes(p.partition));
  return html`<fieldset class=${`field partitions${f.error ? ' invalid' : ''}`} aria-describedby=${describedBy}>
    <legend>Partition</legend>
    <ul class="plain">${offered.map((p) => html`<li key=${p.partition}>
      <label class="check"><input type="radio" name="partition" value=${p.partition} checked=${shown === p.partition}
        onChange=${() => set(p.partition)} />
        <span><strong>${p.partition}</strong>${p.default ? ' (Slurm default)' : ''} — <span class=${p.can_run && p.fits ? 'ok-text' : 'error-text'}>${partitionText(p)}</span></span></label>
    </li>`)}</ul>
    ${others.length > 0 && html`<div class="not-offered"><p class="help">Not offered:</p>
      <ul class="plain small" aria-label="Partitions not offered">${others.map((p) => html`<li key=${p.partition}><strong>${p.partition}</strong>: ${partitionText(p)}</li>`)}</ul></div>`}
  </fieldset>`;
}

function Field({ f, meta, raw, set, reset, preview }) {
  const id = fid(f.field);
  // a read-only field (the model's name when editing) has no provenance: nobody chose its value here
  const describedBy = [meta.readOnly ? null : `${id}-prov`, meta.help ? `${id}-help` : null, f.error ? `${id}-err` : null].filter(Boolean).join(' ');
  const body = meta.kind === 'partition'
    ? html`<${Partitions} f=${f} preview=${preview} raw=${raw} set=${set} describedBy=${describedBy} />`
    : html`<label for=${id}>${meta.label}</label><${Control} id=${id} f=${f} meta=${meta} raw=${raw} set=${set} preview=${preview} describedBy=${describedBy} />`;
  return html`<div class=${`field${f.error ? ' invalid' : ''}${meta.kind === 'partition' ? ' wide' : ''}`} data-field=${f.field}>
    ${body}
    ${!meta.readOnly && html`<${Provenance} id=${id} f=${f} onReset=${reset}
      emptied=${raw === '' && f.value != null && f.value !== '' && f.provenance !== 'user'} />`}
    ${meta.help && html`<p class="help" id=${`${id}-help`}>${meta.help}${meta.min != null || meta.max != null ? ` (${meta.min ?? '…'}–${meta.max ?? '…'})` : ''}</p>`}
    ${f.error && html`<p class="error-text field-error" id=${`${id}-err`}>${f.error.message}</p>`}
  </div>`;
}

const GROUPS = [['name', 'Name'], ['where', 'Where it runs'], ['resources', 'Resources per replica'], ['inputs', 'Recipe inputs'],
  ['run', 'Replicas and job logs'], ['autoscale', 'Autoscaling'], ['health', 'Health check']];

function Suggestions({ preview, onApply, applied }) {
  const list = preview.suggestions || [];
  return html`<section class="card" aria-labelledby="sg-h">
    <h2 id="sg-h">From past runs</h2>
    ${list.length === 0 ? html`<p class="empty">No suggestions: nothing in this recipe's past launches calls for a change.</p>` : html`
    <ul class="plain suggestions">${list.map((s, i) => html`<li key=${i}>
      <p>${s.message}</p>
      <ul class="small evidence" aria-label="Evidence">${(s.evidence || []).map((e, j) => html`<li key=${j}>launch #${e.launch_id}, job <span class="mono">${e.job_id}</span>
        ${e.state ? ` ${e.state}` : ''}${e.reason && e.reason !== 'None' ? ` (${e.reason})` : ''}${e.exit_code != null ? `, exit ${e.exit_code}` : ''}${e.node ? ` on ${e.node}` : ''}</li>`)}</ul>
      <button type="button" class="small" onClick=${() => onApply(s)} aria-label=${`Apply: ${s.message}`}>Apply</button>
    </li>`)}</ul>`}
    <p role="status" class=${applied && applied.length ? 'ok-note' : ''}>${applied && applied.length ? `Applied: ${applied.map((c) => `${labelOf(preview, c.field)} ${c.from ?? '(unset)'} → ${c.to ?? '(unset)'}`).join('; ')}` : ''}</p>
  </section>`;
}

// a setting's label as the server says it (the preview's fields)
const labelOf = (preview, field) => ((preview.fields || []).find((f) => f.field === field) || {}).label || field;

const changedText = (n) => (n === 1 ? '1 setting changed by you' : `${n} settings changed by you`);

function YamlEditor({ source, preview, values, setValues, onBad, draft, lockName }) {
  // a text with problems is kept when switching to the form and back (draft), else made from the form
  const [text, setText] = useState(() => (draft.current != null ? draft.current : toYaml(preview.fields, values)));
  const [diags, setDiags] = useState([]);
  const [checking, setChecking] = useState(false);
  const seq = useRef(0);
  const base = useRef({ fields: preview.fields, values });
  base.current = { fields: preview.fields, values };
  useEffect(() => {
    const t = setTimeout(async () => {
      const n = ++seq.current;
      setChecking(true);
      try {
        const r = await api.post('/deployments/check-yaml', { yaml: text, ...(source.hf ? { hf: source.hf } : { recipe_id: source.recipe_id }) });
        if (n !== seq.current) return;
        onBad(r.ok ? 0 : Math.max(1, (r.diagnostics || []).length));
        draft.current = r.ok ? null : text;
        if (r.ok) {
          setDiags([]);
          const next = valuesFromYaml(r.settings, base.current.fields, base.current.values);
          if (JSON.stringify(next) !== JSON.stringify(base.current.values)) setValues(next);
        } else setDiags(r.diagnostics || []);
      } catch (e) {
        if (n === seq.current) { setDiags([{ line: null, message: e.message }]); onBad(1); }
      }
      if (n === seq.current) setChecking(false);
    }, 400);
    return () => clearTimeout(t);
  }, [text]); // eslint-disable-line
  const lines = text.split('\n');
  const byLine = {};
  for (const d of diags) if (d.line) (byLine[d.line] ||= []).push(d);
  return html`<div class="yaml">
    <label for="yaml-text">Settings as YAML</label>
    <p class="help" id="yaml-help">The same settings as the form; each line is checked by the server as you type. Lines you change show in the form as “changed by you”.</p>
    <div class="yaml-grid">
      <ol class="gutter" aria-hidden="true">${lines.map((_, i) => html`<li key=${i} data-line=${i + 1} class=${byLine[i + 1] ? 'bad' : ''}>${i + 1}</li>`)}</ol>
      <textarea id="yaml-text" rows=${lines.length + 1} wrap="off" spellcheck="false" aria-describedby="yaml-help yaml-diags"
        aria-invalid=${diags.length ? 'true' : undefined} value=${text} onInput=${(e) => setText(e.target.value)}></textarea>
      <ol class="line-notes" aria-hidden="true">${lines.map((_, i) => html`<li key=${i} data-line=${i + 1}>${(byLine[i + 1] || []).map((d) => d.message).join('; ')}</li>`)}</ol>
    </div>
    <div id="yaml-diags" role="status">
      ${diags.length === 0 ? html`<p class="ok-note">${checking ? 'Checking…' : `No problems · ${changedText(Object.keys(values).filter((k) => !(lockName && k === 'api_model_name')).length)}`}</p>` : html`<ul class="plain diagnostics" aria-label="Problems in the YAML">
        ${diags.map((d, i) => html`<li key=${i} class="error-text">${d.line ? `Line ${d.line}${d.column ? `, column ${d.column}` : ''}: ` : ''}${d.message}</li>`)}</ul>`}
    </div>
  </div>`;
}

function Form({ source, preview, pending, values, setValues, yaml, setYaml, inputDefs, onYamlBad, lockName, seen = null }) {
  const draft = useRef(null);
  const [applied, setApplied] = useState(null);
  const before = useRef(null);
  useEffect(() => {
    if (before.current && !pending) { setApplied(changes(before.current, preview.fields)); before.current = null; }
  }, [preview, pending]);
  // values hold what the user typed; typed() turns numbers into numbers when the body is built
  const set = (field) => (raw) => setValues({ ...values, [field]: raw });
  const reset = (field) => () => { const v = { ...values }; delete v[field]; setValues(v); };
  const apply = (s) => { before.current = preview.fields; setValues({ ...values, [s.field]: s.value }); };
  const groups = GROUPS.map(([g, title]) => [g, title, preview.fields.filter((f) => fieldMeta(f.field, inputDefs).group === g)]).filter((x) => x[2].length);
  return html`<div class="form-step">
    <div class="card">
      <div class="card-head"><h2 id="form-h">Where and how it runs</h2>
        <button type="button" aria-pressed=${yaml ? 'true' : 'false'} onClick=${() => setYaml(!yaml)}>Edit as › YAML</button></div>
      ${!yaml && draft.current != null && html`<p class="warn-text" role="status">The YAML has problems: the form shows the last settings that checked. Choose Edit as › YAML to fix them (your text is kept).</p>`}
      ${(preview.warnings || []).length > 0 && html`<ul class="plain warnings">${preview.warnings.map((w, i) => html`<li key=${i} class="warn-text">${typeof w === 'string' ? w : w.message}</li>`)}</ul>`}
      ${yaml ? html`<${YamlEditor} source=${source} preview=${preview} values=${values} setValues=${setValues} onBad=${onYamlBad} draft=${draft}
        lockName=${lockName} />`
    : groups.map(([g, title, fs]) => html`<fieldset key=${g} class="group"><legend>${title}</legend><div class="fields">
        ${fs.map((f) => {
          const meta = lockName && f.field === 'api_model_name'
            ? { ...fieldMeta(f.field, {}, { [f.field]: f.label }, f.hint), readOnly: true, help: 'The model\'s name: clients send it in "model"; it does not change here.' }
            : fieldMeta(f.field, inputDefs, { [f.field]: f.label }, f.hint);
          // an error about a value the user has changed since is not shown (no stale error while the next preview comes)
          const shownF = f.error && seen && values[f.field] !== seen[f.field] ? { ...f, error: null } : f;
          return html`<${Field} key=${f.field} f=${shownF} meta=${meta} raw=${values[f.field]} set=${set(f.field)} reset=${reset(f.field)} preview=${preview} />`;
        })}</div></fieldset>`)}
    </div>
    <${Suggestions} preview=${preview} onApply=${apply} applied=${applied} />
  </div>`;
}

// ---------------------------------------------------------------- step 3

function Review({ preview, launch, busy, err, submitText = null }) {
  const [save, setSave] = useState(false);
  const [id, setId] = useState('');
  const [name, setName] = useState('');
  const s = preview.settings || {};
  const v = (k) => (s[k] && s[k].value != null ? String(s[k].value) : '(default)');
  const saveErr = err && err.field && err.field.startsWith('save_recipe') ? err : null;
  const req = slurmRequestView(preview);
  const placeholders = placeholdersText(preview.placeholders);
  const submit = (e) => { e.preventDefault(); launch(save ? { id: id.trim(), name: name.trim() || id.trim() } : null); };
  return html`<form onSubmit=${submit}>
    <section class="card" aria-labelledby="rv-h">
      <h2 id="rv-h">Review</h2>
      <p>${v('api_model_name')} on partition <strong>${v('partition')}</strong>, account <strong>${v('account')}</strong>, QoS <strong>${v('qos')}</strong>,
        walltime <strong>${s.time_limit && s.time_limit.value != null ? minutes(s.time_limit.value) : '(default)'}</strong>, ${s.replicas && s.replicas.value != null ? count('replica', s.replicas.value) : 'replicas (default)'}.</p>
      ${(preview.warnings || []).length > 0 && html`<div><h3>Warnings</h3><ul class="warnings">${preview.warnings.map((w, i) => html`<li key=${i}>${typeof w === 'string' ? w : w.message}</li>`)}</ul></div>`}
    </section>
    ${placeholders && html`<p class="help" id="ph-note">${placeholders}</p>`}
    <section class="card" aria-labelledby="js-h">
      <div class="card-head"><h2 id="js-h">Job script</h2>${preview.job_script != null && html`<${CopyButton} text=${preview.job_script} label="Copy the job script" />`}</div>
      ${preview.job_script != null
        ? html`<pre class="code" tabindex="0" aria-label="Job script (read-only)" aria-describedby=${placeholders ? 'ph-note' : undefined}>${preview.job_script}</pre>`
        : html`<p class="empty">The job script is not known until Slurm is connected.</p>`}
    </section>
    <section class="card" aria-labelledby="sr-h">
      <div class="card-head"><h2 id="sr-h">Sent to slurmrestd</h2>${req.known && html`<${CopyButton} text=${req.body} label="Copy the request" />`}</div>
      ${req.known ? html`<p class="help">${req.line}</p>
        <pre class="code" tabindex="0" aria-label="slurmrestd request (read-only)" aria-describedby=${placeholders ? 'ph-note' : undefined}>${req.body}</pre>`
      : html`<p class="empty">${req.text} <${Link} href="/deployments?slurm=1">Set up Slurm<//> on Deployments.</p>`}
    </section>
    <section class="card" aria-labelledby="sv-h">
      <h2 id="sv-h" class="sr-only">${submitText || 'Launch'}</h2>
      ${!submitText && html`<label class="check"><input type="checkbox" checked=${save} onChange=${(e) => {
        setSave(e.target.checked);
        // the server's free id (from the API model name) unless one is typed already
        if (e.target.checked && !id && preview.save_recipe_id) setId(preview.save_recipe_id);
      }} /> Also save these settings as a recipe</label>`}
      ${save && html`<div class="grid2">
        <div class=${`field${saveErr && saveErr.field === 'save_recipe.id' ? ' invalid' : ''}`}><label for="sv-id">Recipe id</label>
          <input id="sv-id" value=${id} required onInput=${(e) => setId(e.target.value)} aria-describedby="sv-err" /></div>
        <div class="field"><label for="sv-name">Recipe name</label><input id="sv-name" value=${name} onInput=${(e) => setName(e.target.value)} /></div>
      </div>`}
      <p id="sv-err">${saveErr && html`<span class="error-text">${saveErr.message}</span>`}</p>
      ${err && !saveErr && html`<${ErrorNote} err=${err} label=${submitText ? 'Not saved' : 'Not launched'} />`}
      ${err && (err.body && err.body.errors || []).length > 1 && html`<ul class="error-text">${err.body.errors.map((e, i) => html`<li key=${i}>${e.field}: ${e.message}</li>`)}</ul>`}
      <div class="actions"><button type="submit" class="primary" aria-disabled=${busy ? 'true' : undefined}>${busy ? 'Saving…' : submitText || 'Launch'}</button></div>
    </section>
  </form>`;
}

// ---------------------------------------------------------------- the page

const STEPS = ['Pick what to run', 'Where and how it runs', 'Review and launch'];

// The header's word on the settings: the YAML's problems count while it has any ("Ready to review" never
// while Edit as › YAML lists errors), else the preview's.
function statusText(pending, preview, yamlProblems) {
  if (yamlProblems > 0) return `${yamlProblems} problem${yamlProblems === 1 ? '' : 's'} in the YAML`;
  if (pending) return 'Checking…';
  return preview.ok ? 'Ready to review' : `${preview.errors.length} problem${preview.errors.length === 1 ? '' : 's'}`;
}

export function NewDeployment({ loc }) {
  const [step, setStep] = useState(1);
  const [source, setSource] = useState(null);
  const [label, setLabel] = useState('');
  const [pickTab, setPickTab] = useState(null); // the step-1 choice, kept for Back
  return html`<${Layout} title="New deployment" path=${loc.path}>
    <ol class="wizard" aria-label="Steps">${STEPS.map((s, i) => html`<li key=${s} aria-current=${step === i + 1 ? 'step' : undefined}
      class=${step === i + 1 ? 'current' : step > i + 1 ? 'done' : ''}>${i + 1}. ${s}</li>`)}</ol>
    ${step === 1 ? html`<${Pick} tab=${pickTab} setTab=${setPickTab} onPick=${(src, l) => { setSource(src); setLabel(l); setStep(2); }} />`
    : html`<${Configure} source=${source} label=${label} step=${step} setStep=${setStep} />`}
  <//>`;
}

/** Steps 2 and 3 for one source (also used to edit a deployment: initial values, onSubmit). */
export function Configure({ source, label, step, setStep, initial = {}, submitText = null, onSubmit = null }) {
  const [values, setValues] = useState(initial);
  const [yaml, setYaml] = useState(false);
  const [inputDefs, setInputDefs] = useState({});
  const [note, setNote] = useState('');
  const [launching, setLaunching] = useState(false);
  const [launchErr, setLaunchErr] = useState(null);
  const [yamlBad, setYamlBad] = useState(0); // problems the YAML text has (0: none, or not editing it)
  useEffect(() => setNote(''), [JSON.stringify(values), yaml]); // eslint-disable-line
  const kinds = (vals) => Object.fromEntries(Object.entries(vals).map(([k, v]) => [k, typed(fieldMeta(k, inputDefs).kind, v)]));
  const body = requestBody(source, kinds(values));
  const { preview, error, pending, now, seen } = usePreview(source, body, values);
  const recipeId = preview && preview.recipe && preview.recipe.id;
  useEffect(() => {
    if (!recipeId) return;
    api.get(`/recipes/${encodeURIComponent(recipeId)}`).then((r) => setInputDefs((r.recipe && r.recipe.inputs) || {}), () => {});
  }, [recipeId]);
  useEffect(() => { const m = document.getElementById('main'); if (m) m.focus(); }, [step]);

  const toReview = async () => {
    if (yaml && yamlBad) { setNote('Fix the YAML first: each problem is shown on its line.'); return; }
    const p = await now();
    if (!p) return;
    if (!p.ok) {
      setNote(`Fix ${p.errors.length === 1 ? 'the problem' : `the ${p.errors.length} problems`} shown at the fields first.`);
      const first = p.errors[0] && document.getElementById(fid(p.errors[0].field));
      if (first) first.focus();
      return;
    }
    setNote('');
    setStep(3);
  };
  const launch = async (saveRecipe) => {
    setLaunching(true); setLaunchErr(null);
    try {
      if (onSubmit) { await onSubmit(body, preview); return; }
      const r = await api.post('/deployments/launch', { ...body, ...(saveRecipe ? { save_recipe: saveRecipe } : {}) });
      navigate(`/deployments/${r.model.id}`);
    } catch (e) {
      setLaunchErr(e);
      setLaunching(false);
    }
  };
  if (!preview) return html`<div class="card"><p>${error ? '' : 'Reading the cluster…'}</p><${ErrorNote} err=${error} /></div>`;
  return html`<div>
    <p class="picked">Running <strong>${label}</strong>${preview.recipe ? html` <span class="muted">(recipe ${preview.recipe.name || preview.recipe.id})</span>` : ''}
      <span class="preview-status" role="status">${statusText(pending, preview, yaml ? yamlBad : 0)}</span></p>
    <${ErrorNote} err=${error} />
    ${step === 2 ? html`<${Form} source=${source} preview=${preview} pending=${pending} values=${values} setValues=${setValues} seen=${seen}
        yaml=${yaml} setYaml=${(on) => { setYaml(on); setYamlBad(0); }} inputDefs=${inputDefs} onYamlBad=${setYamlBad} lockName=${!!onSubmit} />
      <div class="actions sticky"><p class="error-text grow" role="alert">${note}</p>
        ${!onSubmit && html`<button type="button" onClick=${() => setStep(1)}>Back</button>`}
        <button type="button" class="primary" onClick=${toReview}>Review</button></div>`
    : html`<${Review} preview=${preview} launch=${launch} busy=${launching} err=${launchErr} submitText=${submitText} />
      <div class="actions start"><button type="button" onClick=${() => setStep(2)}>Back to the settings</button></div>`}
  </div>`;
}
