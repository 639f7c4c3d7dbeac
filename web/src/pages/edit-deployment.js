// /deployments/{model_id}?edit=1: a deployment's settings through the same form as New deployment (steps 2
// and 3). The form starts from the managed spec: its values that differ from the recipe's show as
// "changed by you". Save is PUT /api/v1/models/{id}/managed with the spec the preview answers; the server
// runs the launch's cluster checks and refuses with per-field errors (nothing stored, replicas untouched).
import { useEffect, useState } from 'preact/hooks';
import { html } from '../html.js';
import { api } from '../api.js';
import { Link, navigate } from '../router.js';
import { Layout } from '../components/layout.js';
import { ErrorNote } from '../components/notice.js';
import { specValues } from '../lib/launch-form.js';
import { Configure } from './new-deployment.js';

async function load(id) {
  const [model, spec] = await Promise.all([api.get(`/models/${encodeURIComponent(id)}`), api.get(`/models/${encodeURIComponent(id)}/managed`)]);
  // what the recipe alone gives under this name, to tell the spec's own values from the recipe's
  const base = await api.post('/deployments/preview', { recipe_id: spec.recipe_id, api_model_name: model.name, values: {} });
  return { model, spec, initial: { api_model_name: model.name, ...specValues(spec, base.fields) } };
}

export function EditDeployment({ params, loc }) {
  const id = params.modelId;
  const [data, setData] = useState(null);
  const [err, setErr] = useState(null);
  const [step, setStep] = useState(2);
  useEffect(() => { load(id).then(setData, setErr); }, [id]);
  const title = data ? `Edit ${data.model.name}` : 'Edit deployment';
  const save = async (body, preview) => {
    await api.put(`/models/${encodeURIComponent(id)}/managed`, { ...preview.spec, enabled: data.spec.enabled,
      ...(data.spec.launch_id != null ? { launch_id: data.spec.launch_id } : {}) });
    navigate(`/deployments/${encodeURIComponent(id)}`);
  };
  return html`<${Layout} title=${title} path=${loc.path}>
    <p><${Link} href=${`/deployments/${encodeURIComponent(id)}`}>← Back to the deployment<//></p>
    <${ErrorNote} err=${err} />
    ${!data && !err && html`<p class="muted" aria-busy="true">Loading…</p>`}
    ${data && html`<${Configure} source=${{ recipe_id: data.spec.recipe_id }} label=${data.model.name} step=${step} setStep=${setStep}
      initial=${data.initial} submitText="Save changes" onSubmit=${save} />`}
  <//>`;
}
