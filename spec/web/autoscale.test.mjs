// An autoscaled deployment's page says how many replicas it has, how many it wants and why (the server's
// words: the scale policy's reason), and what the spec asks for.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { newPage, axe, signIn, assertClean, clusterEnv, launchSmoke, startHarnessStack, stopHarnessStack } from './support.mjs';

const env = clusterEnv();
const skip = !env && 'the harness cluster is not up (spec/cluster/up.sh)';
let stack;
let b;
before(async () => ({ stack, b } = await startHarnessStack({ interval: '1' })));
after(() => stopHarnessStack(stack, b));

test('an autoscaled model at zero shows 0 now, 0 wanted and that the next request wakes it', { skip }, async () => {
  const id = await launchSmoke(stack, 'auto-web', { replicas: 0 });
  const spec = (await stack.api('GET', `/api/v1/models/${id}/managed`)).json;
  const put = await stack.api('PUT', `/api/v1/models/${id}/managed`, { ...spec, replicas: null,
    autoscale: { min_replicas: 0, max_replicas: 2, target_inflight: 4, scale_down_after: 300, idle_to_zero_after: 1200 } });
  assert.equal(put.status, 200, put.text);
  const { page, rec, shot } = await newPage(b, stack, 'autoscale');
  await signIn(page, stack);
  await page.goto(`/deployments/${id}`);
  await page.getByRole('heading', { level: 1, name: 'auto-web' }).waitFor();
  await page.getByText(/Replicas: 0 now, 0 wanted — scaled to zero/).waitFor();
  assert.match(await page.getByText(/Replicas: 0 now/).innerText(), /wakes on the next request\.$/);
  await page.getByText('follows the load: 0 to 2, 4 requests in flight each').waitFor();
  await page.getByText(/a request wakes it: the router holds it while a replica starts/).waitFor();
  await shot('at-zero');
  await axe(page, 'an autoscaled deployment');
  // the Deployments list shows the range instead of a fixed count
  await page.goto('/deployments');
  await page.getByRole('row', { name: /auto-web/ }).getByText('0 / 0–2').waitFor();
  await shot('list');
  assert.deepEqual(rec.consoleErrors, []);
  assertClean(rec);
});
