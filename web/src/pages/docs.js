// /docs/{page}: a guide page (docs/*.md) as GET /api/v1/docs/{page} gives it: blocks of plain
// strings converted on the server (obleth.api.guide). Every string is rendered as text; nothing here
// parses markdown or HTML. A link to #anchor (from a failure message) scrolls to that section.
import { useEffect } from 'preact/hooks';
import { html } from '../html.js';
import { api } from '../api.js';
import { Link } from '../router.js';
import { useResource } from '../live.js';
import { Layout } from '../components/layout.js';
import { ErrorNote } from '../components/notice.js';

function Runs({ runs }) {
  return (runs || []).map((r, i) => {
    if (r.t === 'code') return html`<code key=${i}>${r.v}</code>`;
    if (r.t === 'strong') return html`<strong key=${i}>${r.v}</strong>`;
    if (r.t === 'em') return html`<em key=${i}>${r.v}</em>`;
    if (r.t === 'link' && typeof r.href === 'string') {
      if (r.href.startsWith('/docs/')) return html`<${Link} key=${i} href=${r.href}>${r.v}<//>`;
      if (r.href.startsWith('#')) return html`<a key=${i} href=${r.href}>${r.v}</a>`;
      if (/^https?:\/\//.test(r.href)) return html`<a key=${i} href=${r.href} rel="noopener noreferrer">${r.v}</a>`;
    }
    return r.v;
  });
}

function Block({ b }) {
  switch (b.type) {
    case 'heading': {
      const level = Math.min(6, Math.max(2, b.level)); // the page's h1 is the document's title (its # heading)
      const Tag = `h${level}`;
      return html`<${Tag} id=${b.id} tabindex="-1"><${Runs} runs=${b.inlines} /><//>`;
    }
    case 'paragraph': return html`<p><${Runs} runs=${b.inlines} /></p>`;
    case 'list': {
      const items = (b.items || []).map((it, i) => html`<li key=${i}><${Runs} runs=${it} /></li>`);
      return b.ordered ? html`<ol start=${b.start || 1}>${items}</ol>` : html`<ul>${items}</ul>`;
    }
    case 'code': return html`<pre class="code"><code>${b.text}</code></pre>`;
    case 'table': return html`<div class="table-wrap"><table class="doc-table">
      <thead><tr>${(b.header || []).map((c, i) => html`<th key=${i} scope="col"><${Runs} runs=${c} /></th>`)}</tr></thead>
      <tbody>${(b.rows || []).map((row, r) => html`<tr key=${r}>${row.map((c, i) => html`<td key=${i}><${Runs} runs=${c} /></td>`)}</tr>`)}</tbody>
    </table></div>`;
    default: return null;
  }
}

export function Docs({ params, loc }) {
  const page = params.page;
  const res = useResource(() => api.get(`/docs/${encodeURIComponent(page)}`), [], [page]);
  const d = res.data;
  // the section the link named: scroll to it and move focus there once the page is drawn
  useEffect(() => {
    if (!d || !location.hash) return;
    const el = document.getElementById(decodeURIComponent(location.hash.slice(1)));
    if (el) { el.scrollIntoView(); el.focus({ preventScroll: true }); }
  }, [d, loc.hash]);
  const blocks = d ? d.blocks.filter((b, i) => !(i === 0 && b.type === 'heading' && b.level === 1)) : [];
  return html`<${Layout} title=${d ? d.title : 'Guide'} path=${loc.path}>
    <nav aria-label="Guide pages" class="doc-pages"><ul class="plain inline">
      ${(d ? d.pages : []).map((p) => html`<li key=${p.page}><${Link} href=${`/docs/${p.page}`} aria-current=${p.page === page ? 'page' : undefined}>${p.title}<//></li>`)}
    </ul></nav>
    ${res.error && html`<${ErrorNote} err=${res.error} label="Could not load the guide page" />`}
    ${!d && !res.error && html`<p class="muted" aria-busy="true">Loading…</p>`}
    ${d && html`<article class="card doc">${blocks.map((b, i) => html`<${Block} key=${i} b=${b} />`)}</article>`}
  <//>`;
}
