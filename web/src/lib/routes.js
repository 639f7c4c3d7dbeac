// The dashboard's routes: a path → {name, params}. The server answers
// index.html for each of these paths; everything else is "not found".

const ROUTES = [
  ['signin', /^\/signin\/?$/],
  ['deployments', /^\/(?:deployments\/?)?$/],
  ['new-deployment', /^\/deployments\/new\/?$/],
  ['deployment', /^\/deployments\/([^/]+)\/?$/, ['modelId']],
  ['keys', /^\/keys\/?$/],
  ['cluster', /^\/cluster\/?$/],
  ['tokens', /^\/tokens\/?$/],
  ['audit', /^\/audit\/?$/],
  ['docs', /^\/docs\/([a-z0-9-]+)\/?$/, ['page']],
];

/** Match a pathname: {name, params} (name "not-found" when nothing matches). */
export function match(pathname) {
  for (const [name, re, keys = []] of ROUTES) {
    const m = re.exec(pathname);
    if (m) {
      const params = {};
      keys.forEach((k, i) => { params[k] = decodeURIComponent(m[i + 1]); });
      return { name, params };
    }
  }
  return { name: 'not-found', params: {} };
}

/** A local path to return to after sign-in: only same-site paths, never a URL elsewhere. */
export function safeNext(next) {
  if (typeof next !== 'string' || !next.startsWith('/') || next.startsWith('//') || next.startsWith('/\\')) return '/deployments';
  if (next.startsWith('/signin')) return '/deployments';
  return next;
}
