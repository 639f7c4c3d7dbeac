// A stopped model (its spec removed by Stop launching) is launched again, and deleted, from its page,
// and the page asks for nothing that is not there (no 404 in its log).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { newPage, axe, signIn, assertClean, clusterEnv, launchSmoke, startHarnessStack, stopHarnessStack } from './support.mjs';

const env = clusterEnv();
const skip = !env && 'the harness cluster is not up (spec/cluster/up.sh)';
let stack;
let b;
before(async () => ({ stack, b } = await startHarnessStack({ interval: '1' })));
after(() => stopHarnessStack(stack, b));

test('a stopped model is launched again from its page, stopped again, then deleted', { skip }, async () => {
  const id = await launchSmoke(stack, 'stopped-web', { replicas: 0 });
  const { page, rec, shot } = await newPage(b, stack, 'stopped-model');
  const notFound = [];
  page.on('response', (r) => { if (r.status() === 404) notFound.push(r.url()); });
  await signIn(page, stack);
  await page.goto(`/deployments/${id}`);
  await page.getByRole('heading', { level: 1, name: 'stopped-web' }).waitFor();

  // Stop launching, as a person would
  await page.getByRole('button', { name: 'Stop launching' }).click();
  await page.getByRole('dialog').getByRole('button', { name: 'Stop launching' }).click();
  await page.getByText('Stopped: obleth launches nothing for this model').waitFor();
  const again = page.getByRole('button', { name: 'Launch again' });
  await again.waitFor();
  await page.getByRole('button', { name: 'Delete model' }).waitFor();
  assert.equal(await page.getByRole('button', { name: 'Pause' }).count(), 0);
  await shot('stopped');
  await axe(page, 'a stopped model');

  // Launch again: the last launch's recipe and settings, said before it is done
  await again.click();
  const dialog = page.getByRole('dialog', { name: 'Launch stopped-web again?' });
  await dialog.waitFor();
  assert.match(await dialog.innerText(), /launch #1 \(smoke-test/);
  await shot('launch-again-asks');
  await axe(page, 'the Launch again dialog');
  await dialog.getByRole('button', { name: 'Launch again' }).click();
  await page.getByText('Launched again').waitFor();
  await page.getByRole('button', { name: 'Pause' }).waitFor();
  assert.equal(await page.getByRole('button', { name: 'Delete model' }).count(), 0);
  const launches = (await stack.api('GET', `/api/v1/deployments/launches?model_id=${id}`)).json.launches;
  assert.equal(launches.length, 2);
  assert.equal((await stack.api('GET', `/api/v1/models/${id}/managed`)).json.launch_id, launches[0].id);
  await page.getByRole('table', { name: 'Launch history' }).getByText('#2').waitFor();
  await shot('launched-again');

  // stop once more, then Delete model: back on Deployments, and the model is gone
  await page.getByRole('button', { name: 'Stop launching' }).click();
  await page.getByRole('dialog').getByRole('button', { name: 'Stop launching' }).click();
  await page.getByRole('button', { name: 'Delete model' }).click();
  const del = page.getByRole('dialog', { name: 'Delete stopped-web?' });
  await del.waitFor();
  await shot('delete-asks');
  await del.getByRole('button', { name: 'Delete model' }).click();
  await page.waitForURL((u) => u.pathname === '/deployments');
  await page.getByRole('heading', { level: 1, name: 'Deployments' }).waitFor();
  assert.equal(await page.getByRole('link', { name: 'stopped-web' }).count(), 0);
  assert.equal((await stack.api('GET', `/api/v1/models/${id}`)).status, 404);
  await shot('deleted');
  assert.deepEqual(notFound, [], 'the page asked for something that is not there');
  assert.deepEqual(rec.consoleErrors, []);
  assertClean(rec);
});
