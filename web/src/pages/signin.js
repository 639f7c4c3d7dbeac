// /signin: the admin token is typed once and exchanged for a session cookie
// (POST /api/v1/session). The token is never kept by the page.
import { resetSession } from '../session.js';
import { useEffect, useRef, useState } from 'preact/hooks';
import { html } from '../html.js';
import { api } from '../api.js';
import { navigate } from '../router.js';
import { safeNext } from '../lib/routes.js';
import { closeEvents } from '../live.js';

export function SignIn({ loc }) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState(null);
  const input = useRef(null);
  const next = safeNext(loc.search.get('next'));
  useEffect(() => {
    document.title = 'Sign in · obleth';
    input.current.focus();
  }, []);
  const submit = async (e) => {
    e.preventDefault();
    if (busy) return;
    const token = input.current.value;
    if (!token) { setError('Enter the admin token.'); return; }
    setBusy(true);
    setError(null);
    try {
      await api.signIn(token);
      resetSession();
      input.current.value = '';
      closeEvents(); // a stream refused before sign-in is opened again with the new session
      navigate(next, { replace: true });
    } catch (err) {
      setError(err.status === 401 ? 'That is not the admin token.' : err.message);
      setBusy(false);
      input.current.select();
    }
  };
  return html`<main id="main" class="signin">
    <form class="card signin-card" onSubmit=${submit} aria-describedby="signin-help">
      <h1>Sign in to obleth</h1>
      <p id="signin-help" class="help">Enter the admin token (<code>OBLETH_ADMIN_TOKEN</code>, or the file <code>OBLETH_ADMIN_TOKEN_FILE</code> names). It is exchanged for a session cookie and not kept by this page.</p>
      <label for="token">Admin token</label>
      <input id="token" ref=${input} type="password" autocomplete="current-password" spellcheck="false"
        aria-invalid=${error ? 'true' : undefined} aria-describedby=${error ? 'signin-error' : undefined} />
      ${error && html`<p id="signin-error" class="error" role="alert">${error}</p>`}
      <div class="actions"><button type="submit" class="primary" aria-disabled=${busy ? 'true' : undefined}>${busy ? 'Signing in…' : 'Sign in'}</button></div>
    </form>
  </main>`;
}
