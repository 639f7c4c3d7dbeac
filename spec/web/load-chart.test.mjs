// The deployment page's chart of load and replicas: after a few requests through obleth's router, the
// chart card says them in the server's words (the summary is the chart's text alternative), draws the
// two charts as images with a title, and the table under it has the numbers minute by minute.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { newPage, axe, signIn, assertClean, clusterEnv, launchSmoke, startHarnessStack, stopHarnessStack, until } from './support.mjs';

const env = clusterEnv();
const skip = !env && 'the harness cluster is not up (spec/cluster/up.sh)';
let stack;
let b;
before(async () => ({ stack, b } = await startHarnessStack({ interval: '1' })));
after(() => stopHarnessStack(stack, b));

test('after five requests the chart card says 5 finished, draws requests and replicas, and tabulates them', { skip }, async () => {
  assert.equal((await stack.api('PUT', '/api/v1/settings/router', { keyless: true })).status, 200);
  const id = await launchSmoke(stack, 'chart-web', { replicas: 1 });
  await until(async () => (await stack.api('GET', `/api/v1/models/${id}`)).json.status === 'active',
    { timeout: 120000, what: 'a healthy replica' });
  for (let i = 0; i < 5; i++) {
    const r = await fetch(`${stack.base}/v1/chat/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: 'chart-web', messages: [{ role: 'user', content: `hello ${i}` }] }) });
    assert.equal(r.status, 200, await r.text());
  }
  const { page, rec, shot } = await newPage(b, stack, 'load-chart');
  await signIn(page, stack);
  await page.goto(`/deployments/${id}`);
  const card = page.getByRole('region', { name: 'Load and replicas' });
  const summary = card.getByText(/In the last \d+ min: at most 1 request in flight and 0 queued at once, 5 finished/);
  await summary.waitFor();
  // the launch's first minutes may have had its replica not yet recorded (0), never more than 1
  assert.match(await summary.innerText(), /Replicas in this span: ([01] to )?1 running or on their way, ([01] to )?1 wanted\./);
  const req = card.getByRole('img', { name: 'Requests per minute, last 6 h' });
  await req.waitFor();
  assert.match(await req.getAttribute('aria-labelledby'), /chart-req-t chart-req-d/);
  await card.getByRole('img', { name: 'Replicas, last 6 h' }).waitFor();
  for (const word of ['In flight', 'Queued', 'Finished per minute', 'Replicas now', 'Replicas wanted']) {
    await card.getByRole('listitem').filter({ hasText: word }).first().waitFor();
  }
  // the finished line is drawn (a path with at least a point)
  assert.ok((await card.locator('path.line.s3').first().getAttribute('d')).startsWith('M'));
  await shot('chart');
  await card.getByText(/The numbers, minute by minute/).click();
  const table = card.getByRole('table', { name: 'Load and replicas per minute, newest first' });
  await table.waitFor();
  const heads = await table.getByRole('columnheader').evaluateAll((ths) => ths.map((th) => th.textContent.trim()));
  const col = (name) => heads.indexOf(name);
  const rows = await table.locator('tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.children].map((c) => c.textContent.trim())));
  assert.ok(rows.length >= 1);
  assert.equal(rows.reduce((n, r) => n + Number(r[col('Finished per minute')]), 0), 5, JSON.stringify(rows));
  assert.equal(rows[0][col('Replicas now')], '1');
  assert.equal(rows[0][col('Replicas wanted')], '1');
  await shot('table');
  await axe(page, 'the deployment page with its load chart');
  // a shorter span is asked of the server
  await card.getByLabel('Show the last').selectOption('1');
  await card.getByRole('img', { name: 'Requests per minute, last 1 h' }).waitFor();
  assert.deepEqual(rec.consoleErrors, []);
  assertClean(rec);
});
