// The one module every call to the Management API goes through.
// - same-origin, with the session cookie (the admin token is never held here);
// - every non-GET request carries X-Requested-With: obleth (the server's CSRF check);
// - one error shape: ApiError {status, code, message, field, body};
// - 401 on anything but the sign-in call → the sign-in page, returning here after.
import { navigate } from './router.js';

export class ApiError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {};
    super(e.message || `the server answered ${status}`);
    this.status = status;
    this.code = e.code || (status === 0 ? 'network' : 'http_' + status);
    this.field = e.field || null;
    this.body = body;
  }
}

function onSignedOut() {
  if (location.pathname !== '/signin') {
    navigate(`/signin?next=${encodeURIComponent(location.pathname + location.search)}`, { replace: true });
  }
}

/**
 * One request. path is under /api/v1 (e.g. "/models"); query an object of parameters.
 * Resolves to the decoded JSON (null for 204); rejects with ApiError.
 */
export async function request(method, path, { body, query, signin = false } = {}) {
  let url = `/api/v1${path}`;
  if (query) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(query)) if (v != null) q.set(k, String(v));
    const s = q.toString();
    if (s) url += `?${s}`;
  }
  const headers = { Accept: 'application/json' };
  if (method !== 'GET') headers['X-Requested-With'] = 'obleth';
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let res;
  try {
    res = await fetch(url, { method, headers, credentials: 'same-origin', cache: 'no-store',
      body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (e) {
    throw new ApiError(0, { error: { code: 'network', message: 'The server did not answer (is obleth serve running?).' } });
  }
  let data = null;
  const text = await res.text();
  if (text) {
    try { data = JSON.parse(text); } catch { data = null; }
  }
  if (res.status === 401 && !signin) onSignedOut();
  if (!res.ok) throw new ApiError(res.status, data);
  return data;
}

export const api = {
  get: (path, query) => request('GET', path, { query }),
  post: (path, body, query) => request('POST', path, { body, query }),
  put: (path, body, query) => request('PUT', path, { body, query }),
  patch: (path, body) => request('PATCH', path, { body }),
  del: (path, query) => request('DELETE', path, { query }),
  signIn: (token) => request('POST', '/session', { body: { token }, signin: true }),
  signInUser: (user, password) => request('POST', '/session', { body: { user, password }, signin: true }),
  signInMethods: () => request('GET', '/session/methods', { signin: true }),
  session: () => request('GET', '/session', { signin: true }),
  signOut: () => request('DELETE', '/session', { signin: true }),
};
