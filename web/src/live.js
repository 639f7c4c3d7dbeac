// Live data: one EventSource on /api/v1/events for the whole page, and
// useResource(), which loads something and loads it again when the server
// says a topic it depends on changed (a burst of events → one refetch).
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { request } from './api.js';

const listeners = new Set();
let source = null;
let status = 'connecting';
let retryIn = 500;
const statusListeners = new Set();

function setStatus(s) {
  if (s === status) return;
  status = s;
  statusListeners.forEach((fn) => fn(s));
}

function open() {
  if (source || typeof EventSource === 'undefined') return;
  source = new EventSource('/api/v1/events', { withCredentials: true });
  source.addEventListener('open', () => { setStatus('live'); retryIn = 500; });
  // the server's first event on every (re)connect: anything may have changed while we were away
  source.addEventListener('ready', () => {
    setStatus('live');
    listeners.forEach((fn) => fn({ topic: '*' }));
  });
  source.addEventListener('error', () => {
    setStatus('reconnecting');
    // EventSource retries a dropped stream by itself, but gives up on an HTTP error (401 before
    // sign-in, 503 while the server restarts): then open a new one, a little later each time
    if (source && source.readyState === EventSource.CLOSED) {
      source = null;
      // refused: was it the session? (a 401 here sends the page to sign-in, like any call)
      request('GET', '/session').catch(() => {});
      retryIn = Math.min(retryIn * 2, 30000);
      setTimeout(() => { if (listeners.size || statusListeners.size) open(); }, retryIn);
    }
  });
  source.addEventListener('change', (e) => {
    let d;
    try { d = JSON.parse(e.data); } catch { return; }
    listeners.forEach((fn) => fn(d));
  });
}

/** Close the stream (on sign-out). */
export function closeEvents() {
  if (source) source.close();
  source = null;
  setStatus('connecting');
}

/** Call fn({topic, model_id?}) on every change event while mounted. */
export function useEvents(fn) {
  const ref = useRef(fn);
  ref.current = fn;
  useEffect(() => {
    open();
    const l = (d) => ref.current(d);
    listeners.add(l);
    return () => listeners.delete(l);
  }, []);
}

/** "live" | "reconnecting" | "connecting": shown in the header. */
export function useLiveStatus() {
  const [s, setS] = useState(status);
  useEffect(() => { statusListeners.add(setS); open(); return () => statusListeners.delete(setS); }, []);
  return s;
}

/**
 * Load with fetcher() now and again whenever an event's topic is in topics (and, when
 * modelId is given, the event has no model_id or that one). Returns {data, error, loading, reload}.
 */
export function useResource(fetcher, topics, deps = [], modelId = null) {
  const [state, setState] = useState({ data: null, error: null, loading: true });
  const seq = useRef(0);
  const timer = useRef(null);
  const load = useCallback(async () => {
    const n = ++seq.current;
    try {
      const data = await fetcher();
      if (n === seq.current) setState({ data, error: null, loading: false });
    } catch (error) {
      if (n === seq.current) setState((s) => ({ data: s.data, error, loading: false }));
    }
  }, deps); // eslint-disable-line
  useEffect(() => {
    setState((s) => ({ ...s, loading: true }));
    load();
  }, [load]);
  useEvents((d) => {
    if (d.topic !== '*' && !topics.includes(d.topic)) return;
    if (modelId != null && d.model_id != null && String(d.model_id) !== String(modelId)) return;
    clearTimeout(timer.current);
    timer.current = setTimeout(load, 50);
  });
  useEffect(() => () => clearTimeout(timer.current), []);
  return { ...state, reload: load };
}

/** The current time in epoch seconds, ticking every `every` seconds (for "3 min ago"). */
export function useNow(every = 5) {
  const [now, setNow] = useState(() => Date.now() / 1000);
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now() / 1000), every * 1000);
    return () => clearInterval(t);
  }, [every]);
  return now;
}
