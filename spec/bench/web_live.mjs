// Benchmark: how long after the Management API has a replica's new state the deployment page shows
// it, without a reload (the page follows GET /api/v1/events). It was a timed assertion in
// spec/web/deployment.test.mjs ("1:submitted showed 2046 ms after the API had it" failed make check
// on a busy machine); a duration belongs here. Two smoke-test replicas are launched on the harness
// cluster; the API is polled every 100 ms (so its times are late by up to 100 ms plus a request), the
// page records when each replica row first shows each state (a MutationObserver). States shorter than
// the page's refresh never show and are left out.
//   node spec/bench/web_live.mjs     (spec/bench/web_live.sh; make bench runs it when the cluster is up)
import { startHarnessStack, stopHarnessStack, signIn, launchSmoke, watchApiStates, recordReplicaStates,
  shownAt } from '../web/support.mjs';

const { stack, b } = await startHarnessStack({ interval: '1' });
if (!stack) {
  console.log('web_live: skipped: the harness cluster is not up (spec/cluster/up.sh)');
  process.exit(0);
}
try {
  const context = await b.newContext({ viewport: { width: 1280, height: 720 }, baseURL: stack.base });
  const page = await context.newPage();
  await signIn(page, stack);
  const id = await launchSmoke(stack, 'bench-live', { replicas: 2, inputs: { startup_delay: 4 } });
  const apiStates = watchApiStates(stack, id);
  await page.goto(`/deployments/${id}`);
  await page.getByRole('heading', { level: 1, name: 'bench-live' }).waitFor();
  const seen = await recordReplicaStates(page);
  await page.getByRole('region', { name: 'Status' }).getByText('2 of 2 replicas healthy').waitFor({ timeout: 120000 });
  await seen(); // the page never reloaded
  const apiAt = await apiStates();
  const pageAt = await shownAt(page);
  const lags = [];
  console.log('web_live: API -> deployment page, per replica state (ms; API polled every 100 ms)');
  console.log(`  ${'state'.padEnd(14)} ${'lag ms'.padStart(8)}`);
  for (const k of Object.keys(apiAt).sort()) {
    if (!(k in pageAt)) continue;
    const lag = pageAt[k] - apiAt[k];
    lags.push(lag);
    console.log(`  ${k.padEnd(14)} ${String(lag).padStart(8)}`);
  }
  lags.sort((x, y) => x - y);
  if (lags.length) {
    console.log(`  median ${lags[Math.floor(lags.length / 2)]} ms, max ${lags[lags.length - 1]} ms over ${lags.length} states`);
  }
} finally {
  await stopHarnessStack(stack, b);
}
