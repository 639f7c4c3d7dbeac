// Formatting of times, durations and sizes for the dashboard. Pure functions:
// every one takes "now" (epoch seconds) where it needs it, so specs pin them.

/** A duration in seconds as "45 s", "12 min", "3 h 20 min", "2 d 4 h". Negative → same as positive. */
export function duration(seconds) {
  if (seconds == null || !Number.isFinite(seconds)) return '—';
  let s = Math.round(Math.abs(seconds));
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min`;
  const h = Math.floor(m / 60);
  if (h < 48) return m % 60 ? `${h} h ${m % 60} min` : `${h} h`;
  const d = Math.floor(h / 24);
  return h % 24 ? `${d} d ${h % 24} h` : `${d} d`;
}

/** "in 3 h 20 min" / "5 min ago" / "just now" for an epoch-seconds time relative to now. */
export function relative(at, now) {
  if (at == null) return 'never';
  const d = at - now;
  if (Math.abs(d) < 5) return 'just now';
  return d > 0 ? `in ${duration(d)}` : `${duration(d)} ago`;
}

const pad = (n) => String(n).padStart(2, '0');

/** An epoch-seconds time as "2026-12-01 14:05:09 UTC" (operators compare with Slurm's logs). */
export function timestamp(at) {
  if (at == null) return '—';
  const t = new Date(at * 1000);
  if (Number.isNaN(t.getTime())) return '—';
  return `${t.getUTCFullYear()}-${pad(t.getUTCMonth() + 1)}-${pad(t.getUTCDate())} ` +
    `${pad(t.getUTCHours())}:${pad(t.getUTCMinutes())}:${pad(t.getUTCSeconds())} UTC`;
}

/** Minutes (Slurm time limits) as "30 min", "4 h", "2 d 4 h". */
export function minutes(m) {
  if (m == null) return '—';
  return duration(m * 60);
}

/** MiB as "512 MiB", "31.3 GiB"; 0 means the whole node (the managed spec's rule, said in words). */
export function memory(mib) {
  if (mib == null) return '—';
  if (mib === 0) return 'whole node';
  if (mib < 1024) return `${mib} MiB`;
  const g = mib / 1024;
  return `${Number.isInteger(g) ? g : g.toFixed(1)} GiB`;
}

/** Plural helper: count("replica", 2) → "2 replicas"; count("pass", 2, "passes"). */
export function count(word, n, plural = `${word}s`) {
  return `${n} ${n === 1 ? word : plural}`;
}
