// Client-side routing with history.pushState. navigate() changes the URL and
// tells useLocation() users; <Link> is a real <a href> (middle-click works).
import { useEffect, useState } from 'preact/hooks';
import { html } from './html.js';

const EVENT = 'obleth:navigate';

/** Go to a local path (pathname + search). replace: no new history entry. */
export function navigate(to, { replace = false } = {}) {
  if (to === location.pathname + location.search + location.hash) return;
  history[replace ? 'replaceState' : 'pushState'](null, '', to);
  window.dispatchEvent(new Event(EVENT));
}

function current() {
  return { path: location.pathname, search: new URLSearchParams(location.search), hash: location.hash };
}

/** The current location; re-renders on navigate() and on back / forward. */
export function useLocation() {
  const [loc, setLoc] = useState(current);
  useEffect(() => {
    const on = () => setLoc(current());
    window.addEventListener(EVENT, on);
    window.addEventListener('popstate', on);
    return () => { window.removeEventListener(EVENT, on); window.removeEventListener('popstate', on); };
  }, []);
  return loc;
}

/** A link that routes in the page; plain clicks only (modifier keys open a new tab as usual). */
export function Link({ href, children, ...rest }) {
  const onClick = (e) => {
    if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    e.preventDefault();
    navigate(href);
  };
  return html`<a href=${href} onClick=${onClick} ...${rest}>${children}</a>`;
}
