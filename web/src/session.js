// Who is signed in and what their role may do (GET /api/v1/session: user, role, can). The server
// refuses what the role may not do; the page only hides it. Loaded once per page load, and again
// after a sign-in.
import { useEffect, useState } from 'preact/hooks';
import { api } from './api.js';

let current = null;
let pending = null;
const listeners = new Set();

function load() {
  if (!pending) {
    pending = api.session().then((s) => {
      current = { ...s, can: new Set(s.can || []) };
      listeners.forEach((fn) => fn(current));
      return current;
    }).catch(() => { pending = null; return null; });
  }
  return pending;
}

/** Forget who was signed in (after sign-in or sign-out). */
export function resetSession() {
  current = null;
  pending = null;
}

/** The session ({user, role, actor, can: Set}) or null while it loads. */
export function useSession() {
  const [s, setS] = useState(current);
  useEffect(() => {
    listeners.add(setS);
    if (!current) load(); else setS(current);
    return () => listeners.delete(setS);
  }, []);
  return s;
}

/** May the signed-in role take this action? False until the session is known. */
export function can(session, action) {
  return !!(session && session.can && session.can.has(action));
}
