// /signin: the admin token is typed once and exchanged for a session cookie
// (POST /api/v1/session). The token is never kept by the page. When the server signs users in with
// the site's directory (GET /api/v1/session/methods says ldap), a user name and password first, and
// the admin token under "Admin token".
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
  const [ldap, setLdap] = useState(false);
  const [useToken, setUseToken] = useState(false);
  const input = useRef(null);
  const userIn = useRef(null);
  const passIn = useRef(null);
  const next = safeNext(loc.search.get('next'));
  useEffect(() => {
    document.title = 'Sign in · obleth';
    input.current.focus();
    api.signInMethods().then((m) => { if (m && m.ldap) setLdap(true); }).catch(() => {});
  }, []);
  const withUser = ldap && !useToken;
  useEffect(() => { (withUser ? userIn : input).current?.focus(); }, [withUser]);
  const submit = async (e) => {
    e.preventDefault();
    if (busy) return;
    let token, user, password;
    if (withUser) {
      user = userIn.current.value.trim();
      password = passIn.current.value;
      if (!user || !password) { setError('Enter your user name and password.'); return; }
    } else {
      token = input.current.value;
      if (!token) { setError('Enter the admin token.'); return; }
    }
    setBusy(true);
    setError(null);
    try {
      if (withUser) await api.signInUser(user, password);
      else await api.signIn(token);
      resetSession();
      if (input.current) input.current.value = '';
      if (passIn.current) passIn.current.value = '';
      closeEvents(); // a stream refused before sign-in is opened again with the new session
      navigate(next, { replace: true });
    } catch (err) {
      const wrong = withUser ? 'Wrong user name or password.' : 'That is not the admin token.';
      setError(err.status === 401 ? wrong : err.message);
      setBusy(false);
      (withUser ? passIn : input).current?.select();
    }
  };
  const userFields = html`
      <p id="signin-help" class="help">Sign in with your site account. Your groups in the directory give your role.</p>
      <label for="user">User name</label>
      <input id="user" ref=${userIn} type="text" autocomplete="username" spellcheck="false" autocapitalize="off" />
      <label for="password">Password</label>
      <input id="password" ref=${passIn} type="password" autocomplete="current-password"
        aria-invalid=${error ? 'true' : undefined} aria-describedby=${error ? 'signin-error' : undefined} />`;
  return html`<main id="main" class="signin">
    <form class="card signin-card" onSubmit=${submit} aria-describedby="signin-help">
      <h1>Sign in to obleth</h1>
      ${withUser && userFields}
      <div hidden=${withUser}>
      ${!withUser && html`<p id="signin-help" class="help">Enter the admin token (<code>OBLETH_ADMIN_TOKEN</code>, or the file <code>OBLETH_ADMIN_TOKEN_FILE</code> names). It is exchanged for a session cookie and not kept by this page.</p>`}
      <label for="token">Admin token</label>
      <input id="token" ref=${input} type="password" autocomplete="current-password" spellcheck="false"
        aria-invalid=${error ? 'true' : undefined} aria-describedby=${error ? 'signin-error' : undefined} />
      </div>
      ${error && html`<p id="signin-error" class="error" role="alert">${error}</p>`}
      <div class="actions"><button type="submit" class="primary" aria-disabled=${busy ? 'true' : undefined}>${busy ? 'Signing in…' : 'Sign in'}</button>
        ${ldap && html`<button type="button" onClick=${() => { setError(null); setUseToken(!useToken); }}>${useToken ? 'Use your account' : 'Use the admin token'}</button>`}</div>
    </form>
  </main>`;
}
