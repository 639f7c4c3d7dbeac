// Client keys' limits and usage as the keys page shows them (the server counts; this only words it).
import { count } from './format.js';

/** "5 a minute · 2 at once", "5 a minute", "no limit". */
export function limitsText(k) {
  const parts = [];
  if (k.requests_per_minute != null) parts.push(`${k.requests_per_minute} a minute`);
  if (k.max_concurrent != null) parts.push(`${k.max_concurrent} at once`);
  return parts.length ? parts.join(' · ') : 'no limit';
}

/** "12 requests · 340 tokens (120 prompt, 220 completion)", with "· 3 refused by a limit" when any. */
export function usageText(u) {
  if (!u) return '';
  const tokens = (u.prompt_tokens || 0) + (u.completion_tokens || 0);
  let s = count('request', u.requests || 0);
  if (tokens > 0) s += ` · ${count('token', tokens)} (${u.prompt_tokens} prompt, ${u.completion_tokens} completion)`;
  if (u.limited > 0) s += ` · ${u.limited} refused by a limit`;
  return s;
}

/** A limit typed in the form: null when empty, else the whole number (the server checks its range). */
export function limitValue(text) {
  const t = String(text ?? '').trim();
  if (t === '') return null;
  const n = Number(t);
  return Number.isFinite(n) ? n : t;
}
