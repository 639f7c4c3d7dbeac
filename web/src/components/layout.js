// The frame of every signed-in page: skip link, header with navigation and
// sign-out, the live-update status, and <main> with the page's h1.
import { useEffect } from 'preact/hooks';
import { html } from '../html.js';
import { Link, navigate } from '../router.js';
import { api } from '../api.js';
import { closeEvents, useLiveStatus } from '../live.js';
import { useSession, can, resetSession } from '../session.js';

const LIVE_TEXT = { live: 'Live', reconnecting: 'Reconnecting…', connecting: 'Connecting…' };

export function Layout({ title, path, children, actions = null }) {
  const live = useLiveStatus();
  const session = useSession();
  useEffect(() => { document.title = `${title} · obleth`; }, [title]);
  const signOut = async () => {
    try { await api.signOut(); } catch { /* signed out anyway below */ }
    resetSession();
    closeEvents();
    navigate('/signin');
  };
  const nav = (href, label, on) => html`<li><${Link} href=${href} aria-current=${on ? 'page' : undefined}>${label}<//></li>`;
  return html`<div class="frame">
    <a class="skip" href="#main">Skip to content</a>
    <header class="top">
      <span class="brand">obleth</span>
      <nav aria-label="Main">
        <ul>
          ${nav('/deployments', 'Deployments', path.startsWith('/deployments') || path === '/')}
          ${nav('/cluster', 'Cluster', path === '/cluster')}
          ${can(session, 'keys.manage') && nav('/keys', 'Client keys', path === '/keys')}
          ${can(session, 'audit.read') && nav('/audit', 'Audit', path === '/audit')}
          ${can(session, 'session.own') && nav('/tokens', 'Access tokens', path === '/tokens')}
          ${nav('/docs/launch-on-slurm', 'Guide', path.startsWith('/docs/'))}
        </ul>
      </nav>
      <span class=${`live ${live}`} title="Updates from the server">${LIVE_TEXT[live]}</span>
      ${session && session.user && html`<span class="who" aria-label="Signed in as">${session.user} · ${session.role}</span>`}
      <button type="button" class="link" onClick=${signOut}>Sign out</button>
    </header>
    <main id="main" tabindex="-1">
      <div class="page-head">
        <h1>${title}</h1>
        ${actions && html`<div class="page-actions">${actions}</div>`}
      </div>
      ${children}
    </main>
  </div>`;
}
