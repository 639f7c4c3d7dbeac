// The access pages' words (/tokens, /audit): personal access tokens and the audit trail as the
// pages show them. The server decides who may do what (GET /api/v1/session: can, token_roles) and
// what the trail holds (GET /api/v1/audit); these only word and shape it. Pure functions.

/** The audit route's filters (GET /api/v1/audit: ?user, ?model, ?since epoch s, ?limit). */
export const AUDIT_FILTERS = ['user', 'model', 'since', 'limit'];

/** How many entries the page asks for when its URL names no limit (the page's own choice, sent). */
export const AUDIT_DEFAULT_LIMIT = 100;

/**
 * The audit query from the page's URL query: only the route's filters, trimmed, the empty ones left
 * out, and the page's limit when none is named. Values go to the server as typed: it checks them and
 * names the field it refuses.
 * @param {URLSearchParams} search
 * @returns {{user?: string, model?: string, since?: string, limit?: string}}
 */
export function auditQuery(search) {
  const q = {};
  for (const k of AUDIT_FILTERS) {
    const v = (search.get(k) || '').trim();
    if (v !== '') q[k] = v;
  }
  if (!('limit' in q)) q.limit = String(AUDIT_DEFAULT_LIMIT);
  return q;
}

/** The page's URL for a set of filters ("/audit", "/audit?user=alice&limit=20"). */
export function auditHref(filters) {
  const q = new URLSearchParams();
  for (const k of AUDIT_FILTERS) {
    const v = filters[k] == null ? '' : String(filters[k]).trim();
    if (v !== '') q.set(k, v);
  }
  const s = q.toString();
  return s ? `/audit?${s}` : '/audit';
}

const pad = (n) => String(n).padStart(2, '0');

/**
 * A date and time typed in UTC (an <input type="datetime-local"> value: "2026-12-06T06:05" or with
 * seconds) as epoch seconds; null when empty; the text itself when it is no such time (the server
 * then refuses it, naming `since`).
 * @param {string} text
 * @returns {number|string|null}
 */
export function utcInputToEpoch(text) {
  const t = String(text ?? '').trim();
  if (t === '') return null;
  const m = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2}))?$/.exec(t);
  if (!m) return t;
  const ms = Date.UTC(+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +(m[6] || 0));
  return Number.isNaN(ms) ? t : Math.floor(ms / 1000);
}

/** Epoch seconds as an <input type="datetime-local"> value in UTC ("2026-12-06T06:05:09"); "" when not a time. */
export function epochToUtcInput(at) {
  const n = typeof at === 'string' && /^\d+$/.test(at) ? Number(at) : at;
  if (typeof n !== 'number' || !Number.isFinite(n)) return '';
  const d = new Date(n * 1000);
  if (Number.isNaN(d.getTime())) return '';
  return `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())}T` +
    `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}`;
}

const VIA = { token: 'admin token', session: 'dashboard', proxy: 'single sign-on', pat: 'personal token' };

/** How an audit entry's actor reached the API, with their role: "personal token · operator". */
export function viaText(entry) {
  const parts = [];
  if (entry.via) parts.push(VIA[entry.via] || entry.via);
  if (entry.role) parts.push(entry.role);
  return parts.join(' · ');
}

/**
 * An audit entry's summary of the change (the request body without secrets) as text to show; '' when
 * the write had no body. A summary cut at the server's limit says so first.
 */
export function summaryText(summary) {
  if (summary == null) return '';
  if (typeof summary !== 'object') return String(summary);
  if (summary.cut) {
    if (summary.refused) return '(the summary could not be kept)';
    return `(cut: longer than the trail keeps)\n${summary.text ?? ''}`;
  }
  return JSON.stringify(summary, null, 2);
}

/**
 * When a list may have more entries than it shows (it holds as many as were asked for), what to say;
 * null when it holds them all. The route has no paging: older entries are reached by a larger limit
 * or narrower filters.
 */
export function moreNote(count, limit) {
  const n = Number(limit);
  if (!Number.isInteger(n) || count < n) return null;
  return `Showing the newest ${n}: older entries are not listed. Narrow the filters, or show more.`;
}

/**
 * A personal access token's state: "revoked", "expired" (when the server gives it an expiry that has
 * passed) or "active".
 * @param {{revoked_at?: number|null, expires_at?: number|null}} t
 * @param {number} now epoch seconds
 */
export function tokenState(t, now) {
  if (t.revoked_at != null) return 'revoked';
  if (t.expires_at != null && t.expires_at <= now) return 'expired';
  return 'active';
}

/**
 * Which optional columns the token list shows: the ones the server reports (a column saying "never"
 * for every token because the server keeps no such thing would mislead), and whose token each is when
 * the list holds another user's.
 * @param {object[]} list tokens of GET /api/v1/tokens
 * @param {string|null} me the signed-in user (null for the admin token)
 */
export function tokenColumns(list, me) {
  return {
    user: list.some((t) => t.user !== me),
    lastUsed: list.some((t) => 'last_used_at' in t),
    expires: list.some((t) => 'expires_at' in t),
  };
}
