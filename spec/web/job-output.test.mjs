// When a replica fails, its deployment page says why in the engine's own words: the library vLLM
// recipe on the harness (which has no vllm) ends with exit 127, and the page shows the shell's
// "not found" line from the job's stderr, the class "command not found", what to do, a link to the
// guide's section and where the whole log is on the cluster.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { newPage, axe, signIn, assertClean, clusterEnv, startHarnessStack, stopHarnessStack } from './support.mjs';

const env = clusterEnv();
const skip = !env && 'the harness cluster is not up (spec/cluster/up.sh)';
let stack;
let b;
before(async () => ({ stack, b } = await startHarnessStack({ interval: '1' })));
after(() => stopHarnessStack(stack, b));

test('a launch whose engine is not installed shows the job\'s own "not found" line and "command not found" as soon as it ends', { skip }, async () => {
  const l = await stack.api('POST', '/api/v1/deployments/launch', { recipe_id: 'vllm', api_model_name: 'no-vllm-web',
    values: { replicas: 1, time_limit: '5', gpus_per_node: 1, inputs: { model: '/models/none' } } });
  assert.equal(l.status, 201, l.text);
  const id = l.json.model.id;
  const { page, rec, shot } = await newPage(b, stack, 'job-output');
  await signIn(page, stack);
  await page.goto(`/deployments/${id}`);
  await page.getByRole('heading', { level: 1, name: 'no-vllm-web' }).waitFor();
  await shot('coming-up');

  // the first time the page draws the replica as over, it already says why (same refresh, no later one)
  const table = page.getByRole('table', { name: 'Replicas' });
  await table.locator('tr[data-state="ended"], tr[data-state="lost"]').first().waitFor({ timeout: 120000 });
  const why = page.getByRole('group', { name: 'Why replica 1 failed' });
  assert.equal(await why.count(), 1, 'the failure is shown with the end');
  assert.match(await why.innerText(), /Why: command not found/);
  assert.match(await why.getByText(/vllm: (command )?not found/).first().innerText(), /line \d+: vllm: command not found|exec: vllm: not found/);
  assert.match(await why.innerText(), /Slurm says\s*FAILED NonZeroExitCode/i);
  assert.match(await why.innerText(), /exit code 127/);
  assert.match(await why.innerText(), /Avoiding a node will not help/);
  const link = why.getByRole('link', { name: /Replicas and failures/ });
  assert.equal(await link.getAttribute('href'), '/docs/replicas-and-failures#command-not-found');
  const stderr = page.getByLabel('Last lines of stderr, replica 1');
  assert.match(await stderr.innerText(), /vllm: (command )?not found/);
  // where the whole file is, on the cluster
  assert.match(await page.locator('.job-output').first().innerText(), /whole file on the cluster: \/\S+\.err/);
  await shot('failed-with-its-words');
  await axe(page, 'a deployment whose replica failed, with its job output');

  // the failure's link opens the guide at its section
  await link.click();
  await page.waitForURL((u) => u.pathname === '/docs/replicas-and-failures' && u.hash === '#command-not-found');
  const section = page.getByRole('heading', { name: 'Command not found' });
  await section.waitFor();
  assert.equal(await page.evaluate(() => document.activeElement && document.activeElement.id), 'command-not-found');
  assert.ok(await section.evaluate((el) => { const r = el.getBoundingClientRect(); return r.top >= 0 && r.top < innerHeight; }),
    'the section is in view');
  await shot('guide-at-its-section');
  await axe(page, 'the guide at a failure class');
  await page.goBack();
  await page.getByRole('heading', { level: 1, name: 'no-vllm-web' }).waitFor();
  await stack.api('DELETE', `/api/v1/models/${id}/managed`);
  assertClean(rec);
});
