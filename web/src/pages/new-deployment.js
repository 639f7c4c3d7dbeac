// /deployments/new: part 2 (issue 16) puts the New deployment flow here:
// pick a recipe or a Hugging Face repo, one form with provenance, Review, Launch.
import { html } from '../html.js';
import { Layout } from '../components/layout.js';
import { Link } from '../router.js';

export function NewDeployment({ loc }) {
  return html`<${Layout} title="New deployment" path=${loc.path}>
    <section class="card placeholder" aria-labelledby="nd-h">
      <h2 id="nd-h">Not built yet</h2>
      <p>The New deployment form (pick a recipe or a Hugging Face repo, one form where every value says where it
        came from, Review, Launch) is coming in the next part of the dashboard.</p>
      <p>Until then, launch through the Management API: <code>POST /api/v1/deployments/preview</code> and <code>POST /api/v1/deployments/launch</code> (see <code>docs/launch.md</code>). A launched model shows on <${Link} href="/deployments">Deployments<//>.</p>
    </section>
  <//>`;
}
