// The guide in the dashboard: every guide page is reachable from the header, drawn from the server's
// converted markdown as text; a document with HTML or script in it shows it as text and runs nothing.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync, copyFileSync, rmSync, readdirSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { newPage, axe, signIn, assertClean, startStack, browser, ROOT } from './support.mjs';

// every page of docs/ is a guide page (lua/obleth/api/guide.lua PAGES)
const PAGES = readdirSync(path.join(ROOT, 'docs')).filter((f) => f.endsWith('.md')).map((f) => f.slice(0, -3));
let stack;
let b;
let dir;
before(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'obleth-docs-'));
  for (const p of PAGES) copyFileSync(path.join(ROOT, 'docs', `${p}.md`), path.join(dir, `${p}.md`));
  // a hostile edit of one page: markup, script and a javascript: link must come out as text
  writeFileSync(path.join(dir, 'policy.md'), '# Policy\n\nHello <img src=x onerror="alert(1)"> <script>alert(2)</script>\n\n'
    + '[click me](javascript:alert(3)) and [Recipes](recipes.md#recipe-format)\n\n| a | b |\n| --- | --- |\n| `<b>x</b>` | **bold** |\n');
  stack = await startStack({ provisioner: false, serveEnv: { OBLETH_DOCS_DIR: dir } });
  b = await browser();
});
after(async () => { if (b) await b.close(); if (stack) await stack.stop(); rmSync(dir, { recursive: true, force: true }); });

test('the guide pages open from the header and each has its title and sections', async () => {
  const { page, rec, shot } = await newPage(b, stack, 'docs');
  await signIn(page, stack);
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Guide' }).click();
  await page.getByRole('heading', { level: 1, name: 'Launch on Slurm' }).waitFor();
  assert.equal(new URL(page.url()).pathname, '/docs/launch-on-slurm');
  const guide = page.getByRole('navigation', { name: 'Guide pages' });
  for (const p of ['Deployments', 'Replicas and failures', 'Autoscaling', 'Access', 'Recipes']) {
    await guide.getByRole('link', { name: p }).click();
    await page.waitForURL((u) => u.pathname.startsWith('/docs/'));
    await page.locator('article.doc h2').first().waitFor();
    assert.equal(await guide.getByRole('link', { name: p }).getAttribute('aria-current'), 'page');
    await shot(p.toLowerCase().replaceAll(' ', '-'));
  }
  const h1 = await page.getByRole('heading', { level: 1 }).innerText();
  assert.equal(h1, 'Recipes');
  await axe(page, 'a guide page');
  assertClean(rec);
});

test('markup, script and a javascript: link in a guide page are shown as text and run nothing', async () => {
  const { page, rec, shot } = await newPage(b, stack, 'docs-hostile');
  await signIn(page, stack);
  await page.goto('/docs/policy');
  await page.getByText('Hello <img src=x onerror="alert(1)"> <script>alert(2)</script>').waitFor();
  assert.equal(await page.locator('article.doc img, article.doc script').count(), 0);
  assert.equal(await page.getByRole('link', { name: 'click me' }).count(), 0, 'no javascript: link');
  await page.getByText('click me').waitFor();
  assert.equal(await page.getByRole('link', { name: 'Recipes' }).last().getAttribute('href'), '/docs/recipes#recipe-format');
  await page.getByRole('cell', { name: '<b>x</b>' }).waitFor();
  await shot('as-text');
  assert.deepEqual(rec.dialogs, []);
  assertClean(rec);
});
