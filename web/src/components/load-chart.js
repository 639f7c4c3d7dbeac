// The deployment page's chart of a model's load and replicas over the last hours: two small SVG
// charts (requests; replicas), their legend, the server's summary as the text alternative, and the
// numbers as a table. Everything it shows comes from GET /api/v1/models/{id}/load: the series, their
// words, the capacity line and the summary; the page only draws them.
import { useEffect, useState } from 'preact/hooks';
import { html } from '../html.js';
import { api } from '../api.js';
import { ErrorNote } from './notice.js';
import { scale, niceMax, maxOf, linePath, clock, timeTicks, tableRows } from '../lib/chart.js';

// how often the page asks again (the history has a point per minute)
const REFRESH_SECONDS = 30;
const HOURS = [1, 3, 6];
const W = 640;
const H = 150;
const PAD = { left: 36, right: 10, top: 10, bottom: 22 };
// how each series is drawn, by key (its words are the server's); every value holds for its minute: steps
const LOOK = { inflight: 's1', queued: 's2', finished: 's3', capacity: 's4 dashed', current: 's1', desired: 's5 dashed' };

function Chart({ id, title, data, series }) {
  const from = data.observed_since;
  const to = data.to;
  const top = niceMax(maxOf(data.points, series.map((s) => s.key)));
  const x = scale([from, to], [PAD.left, W - PAD.right]);
  const y = scale([0, top], [H - PAD.bottom, PAD.top]);
  const yTicks = top <= 1 ? [0, 1] : [0, top / 2, top];
  return html`<figure class="chart">
    <svg viewBox=${`0 0 ${W} ${H}`} role="img" aria-labelledby=${`${id}-t ${id}-d`} preserveAspectRatio="none">
      <title id=${`${id}-t`}>${title}</title>
      <desc id=${`${id}-d`}>${series.map((s) => s.label).join(', ')}, from ${clock(from)} to ${clock(to)} UTC; the table below has the numbers.</desc>
      ${yTicks.map((v) => html`<g key=${`y${v}`} class="tick">
        <line x1=${PAD.left} x2=${W - PAD.right} y1=${y(v)} y2=${y(v)} />
        <text x=${PAD.left - 4} y=${y(v) + 4} text-anchor="end">${v}</text></g>`)}
      ${timeTicks(from, to).map((t) => html`<text key=${`x${t}`} class="tick" x=${x(t)} y=${H - 6}
        text-anchor=${t === from ? 'start' : t === to ? 'end' : 'middle'}>${clock(t)}</text>`)}
      ${series.map((s) => html`<path key=${s.key} class=${`line ${LOOK[s.key] || 's1'}`}
        d=${linePath(data.points, s.key, x, y, data.step, { stepped: true })} />`)}
    </svg>
    <figcaption><ul class="legend">${series.map((s) => html`<li key=${s.key}>
      <span class=${`swatch ${LOOK[s.key] || 's1'}`} aria-hidden="true"></span>${s.label}</li>`)}</ul></figcaption>
  </figure>`;
}

/** The chart card's body for model `modelId`. */
export function LoadChart({ modelId }) {
  const [hours, setHours] = useState(6);
  const [state, setState] = useState({ data: null, error: null });
  useEffect(() => {
    let live = true;
    const load = () => api.get(`/models/${encodeURIComponent(modelId)}/load`, { hours })
      .then((data) => { if (live) setState({ data, error: null }); })
      .catch((error) => { if (live) setState((s) => ({ data: s.data, error })); });
    load();
    const t = setInterval(load, REFRESH_SECONDS * 1000);
    return () => { live = false; clearInterval(t); };
  }, [modelId, hours]);
  const { data, error } = state;
  if (!data) return error ? html`<${ErrorNote} err=${error} label="Could not load the chart" />`
    : html`<p class="muted" aria-busy="true">Loading…</p>`;
  const requests = data.series.filter((s) => s.chart === 'requests');
  const replicas = data.series.filter((s) => s.chart === 'replicas');
  const rows = tableRows(data.points, data.series);
  return html`<div class="load-chart">
    ${error && html`<${ErrorNote} err=${error} label="Could not refresh the chart" />`}
    <p class="summary" id="load-summary">${data.summary}</p>
    <label class="inline">Show the last <select value=${hours} onChange=${(e) => setHours(Number(e.currentTarget.value))}>
      ${HOURS.filter((h) => h <= data.hours_max).map((h) => html`<option key=${h} value=${h}>${h} h</option>`)}
    </select></label>
    <div class="charts">
      <${Chart} id="chart-req" title=${`Requests per minute, last ${data.hours} h`} data=${data} series=${requests} />
      ${replicas.length > 0 && html`<${Chart} id="chart-rep" title=${`Replicas, last ${data.hours} h`} data=${data} series=${replicas} />`}
    </div>
    <details>
      <summary>The numbers, minute by minute (${rows.length})</summary>
      <div class="table-wrap"><table class="load-table">
        <caption class="sr-only">Load and replicas per minute, newest first</caption>
        <thead><tr><th scope="col">Minute (UTC)</th>${data.series.map((s) => html`<th key=${s.key} scope="col">${s.label}</th>`)}</tr></thead>
        <tbody>${rows.map((r) => html`<tr key=${r.at}><th scope="row" class="mono">${clock(r.at)}</th>
          ${r.cells.map((c, i) => html`<td key=${i} class="num">${c}</td>`)}</tr>`)}</tbody>
      </table></div>
    </details>
  </div>`;
}
