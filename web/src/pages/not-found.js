import { html } from '../html.js';
import { Layout } from '../components/layout.js';
import { Link } from '../router.js';

export function NotFound({ loc }) {
  return html`<${Layout} title="Not found" path=${loc.path}>
    <p>There is no page at <code>${loc.path}</code>. <${Link} href="/deployments">Go to Deployments<//>.</p>
  <//>`;
}
