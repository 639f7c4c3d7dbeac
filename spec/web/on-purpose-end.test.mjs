// A replica obleth cancels on purpose (here: a surplus replica, the count lowered from 2 to 1) is no failure: the
// failures policy says so (obleth.policy.failures.on_purpose), the API's replica log has no `failure`,
// and the deployment page shows the ended replica without the "Why replica N failed" box.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { newPage, signIn, assertClean, clusterEnv, until, launchSmoke, replicasOf, startHarnessStack,
  stopHarnessStack } from './support.mjs';

const env = clusterEnv();
let stack;
let b;
before(async () => ({ stack, b } = await startHarnessStack({ interval: '1' })));
after(() => stopHarnessStack(stack, b));

test('a replica obleth cancelled on purpose (surplus) ends without a failure box', { skip: !env && 'the harness cluster is not up' }, async () => {
  const id = await launchSmoke(stack, 'smoke-down', { replicas: 2 });
  await until(async () => (await replicasOf(stack, id)).filter((r) => r.state === 'healthy').length === 2,
    { timeout: 120000, what: 'both replicas healthy' });
  const spec = (await stack.api('GET', `/api/v1/models/${id}/managed`)).json;
  spec.replicas = 1;
  const put = await stack.api('PUT', `/api/v1/models/${id}/managed`, spec);
  assert.equal(put.status, 200, put.text);
  const ended = await until(async () => (await replicasOf(stack, id))
    .find((r) => r.slot === 2 && r.state === 'ended' && r.end), { timeout: 120000, what: 'replica 2 ended' });
  assert.equal(ended.cancel_why, 'surplus replica'); // obleth's own reason (an autoscaled model's is 'scaled down')
  const log = (await stack.api('GET', `/api/v1/replicas/${ended.id}/log`)).json;
  assert.equal(log.failure, null, `the API calls it a failure: ${JSON.stringify(log.failure)}`);

  const { page, rec, shot } = await newPage(b, stack, 'on-purpose-end');
  await signIn(page, stack);
  await page.goto(`/deployments/${id}`);
  await page.getByRole('heading', { level: 1, name: 'smoke-down' }).waitFor();
  await page.getByRole('table', { name: 'Replicas' }).locator('tr[data-state="ended"]').first().waitFor();
  await page.getByText(/Job output of replica 2/).waitFor();
  await shot('scaled-down');
  assert.equal(await page.getByRole('group', { name: /Why replica \d+ failed/ }).count(), 0,
    'no failure box for a replica obleth cancelled on purpose');
  assert.equal(await page.getByText('What to do').count(), 0);
  await stack.api('DELETE', `/api/v1/models/${id}/managed`);
  assertClean(rec);
});
