// The load chart's pure geometry: scales, nice axis tops, SVG path data with gaps, and the rows of the
// chart's table. What the series are, their words and the thresholds come from the server
// (GET /api/v1/models/{id}/load); nothing here decides what a number means.

/** A linear map from [d0, d1] to [r0, r1] (a zero-width domain maps to r0). */
export function scale([d0, d1], [r0, r1]) {
  const w = d1 - d0;
  return (v) => (w === 0 ? r0 : r0 + ((v - d0) / w) * (r1 - r0));
}

/** The smallest of 1, 2, 5 × 10^k at or above v (at least 1): the top of an axis. */
export function niceMax(v) {
  if (!(v > 1)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

/** The highest value of the given keys over the points (0 when none). */
export function maxOf(points, keys) {
  let m = 0;
  for (const p of points) for (const k of keys) if (typeof p[k] === 'number' && p[k] > m) m = p[k];
  return m;
}

/**
 * SVG path data for one series: a line through each point's value at its minute, broken where a
 * minute has no point (more than `step` seconds between two) or no value. `stepped` draws a count
 * that holds until the next point (replicas) as steps.
 */
export function linePath(points, key, x, y, step, { stepped = false } = {}) {
  let d = '';
  let prev = null;
  for (const p of points) {
    const v = p[key];
    if (typeof v !== 'number') { prev = null; continue; }
    const px = x(p.at);
    const py = y(v);
    if (prev && p.at - prev.at <= step) {
      d += stepped ? ` V${fmt(py)} H${fmt(x(p.at + step))}` : ` L${fmt(px)} ${fmt(py)}`;
    } else {
      d += `${d ? ' ' : ''}M${fmt(px)} ${fmt(py)}`;
      if (stepped) d += ` H${fmt(x(p.at + step))}`;
    }
    prev = p;
  }
  return d;
}

function fmt(n) { return String(Math.round(n * 10) / 10); }

/** "14:05" (UTC, like the rest of the dashboard's times) of an epoch second. */
export function clock(at) {
  const d = new Date(at * 1000);
  return `${String(d.getUTCHours()).padStart(2, '0')}:${String(d.getUTCMinutes()).padStart(2, '0')}`;
}

/** Times for the x axis: the two ends and up to `n` - 2 whole hours or quarter hours between. */
export function timeTicks(from, to, n = 5) {
  const span = to - from;
  const every = [900, 1800, 3600, 7200].find((s) => span / s <= n - 1) || 7200;
  const out = [];
  for (let t = Math.ceil(from / every) * every; t <= to; t += every) out.push(t);
  if (span < every) return [from, to];
  return out;
}

/** The table's rows: the points, newest first, with a value per series key ('—' when it has none). */
export function tableRows(points, series) {
  return [...points].reverse().map((p) => ({ at: p.at, cells: series.map((s) => (typeof p[s.key] === 'number' ? p[s.key] : '—')) }));
}
