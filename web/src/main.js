// The dashboard's entry: routes the current path to its page.
import { render } from 'preact';
import { useEffect, useRef } from 'preact/hooks';
import { html } from './html.js';
import { useLocation } from './router.js';
import { match } from './lib/routes.js';
import { SignIn } from './pages/signin.js';
import { Deployments } from './pages/deployments.js';
import { Deployment } from './pages/deployment.js';
import { NewDeployment } from './pages/new-deployment.js';
import { EditDeployment } from './pages/edit-deployment.js';
import { Keys } from './pages/keys.js';
import { Cluster } from './pages/cluster.js';
import { Tokens } from './pages/tokens.js';
import { Audit } from './pages/audit.js';
import { Docs } from './pages/docs.js';
import { NotFound } from './pages/not-found.js';

const PAGES = { signin: SignIn, deployments: Deployments, deployment: Deployment,
  'new-deployment': NewDeployment, 'edit-deployment': EditDeployment, keys: Keys, cluster: Cluster, tokens: Tokens, audit: Audit, docs: Docs, 'not-found': NotFound };

function App() {
  const loc = useLocation();
  const route = match(loc.path);
  // /deployments/{id}?edit=1: the deployment's settings in the New deployment form
  const name = route.name === 'deployment' && loc.search.get('edit') === '1' ? 'edit-deployment' : route.name;
  const Page = PAGES[name];
  // a new page (not the first load): focus its main region so keyboard and screen-reader users
  // start there, unless the page already put focus somewhere (sign-in's token field)
  const first = useRef(true);
  useEffect(() => {
    if (first.current) { first.current = false; return; }
    const main = document.getElementById('main');
    if (main && (document.activeElement === document.body || !document.activeElement)) main.focus();
  }, [loc.path]);
  return html`<${Page} key=${name + (route.params.modelId || route.params.page || '')} params=${route.params} loc=${loc} />`;
}

render(html`<${App} />`, document.getElementById('app'));
