// Models whose jobs cannot start: a spec Slurm refuses shows the refused-job
// message (on Deployments and on its page) and Dismiss clears it; a never-healthy
// engine ends up lost and "Try once more" submits again.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { newPage, axe, signIn, assertClean, clusterEnv, until, pressWithKeyboard, launchSmoke, replicasOf,
  liveJobs, startHarnessStack, stopHarnessStack } from './support.mjs';

const env = clusterEnv();
const skip = !env && 'the harness cluster is not up (spec/cluster/up.sh)';
let stack;
let b;
before(async () => ({ stack, b } = await startHarnessStack({ interval: '1' })));
after(() => stopHarnessStack(stack, b));

test('a spec Slurm refuses shows the refused-job message; paused, Dismiss clears it', { skip }, async () => {
  const m = (await stack.api('POST', '/api/v1/models', { name: 'refused-web' })).json;
  const put = await stack.api('PUT', `/api/v1/models/${m.id}/managed?check=false`, { partition: 'nosuch', replicas: 1, time_limit: 5,
    launch_command: 'sleep 600' });
  assert.equal(put.status, 201, put.text);
  const { page, rec, shot } = await newPage(b, stack, 'refused');
  await signIn(page, stack);
  const row = page.getByRole('row', { name: /refused-web/ });
  await row.getByText('Invalid partition name specified').waitFor({ timeout: 30000 });
  await shot('deployments-refused');

  await page.getByRole('link', { name: 'refused-web' }).click();
  const alert = page.getByRole('alert').filter({ hasText: 'Slurm refused the last job' });
  await alert.waitFor();
  assert.match(await alert.innerText(), /Invalid partition name specified/);
  // the refused setting by its label, and the guide's section
  assert.match(await alert.innerText(), /\(setting: Partition\)/);
  assert.equal(await alert.getByRole('link', { name: /Replicas and failures/ }).getAttribute('href'), '/docs/replicas-and-failures#refused-by-slurm');
  // the refused submit is no job: not drawn as Waiting to submit (no step reached)
  const refusedRow = page.getByRole('table', { name: 'Replicas' }).locator('p.off.refused').first();
  await refusedRow.waitFor();
  assert.match(await refusedRow.innerText(), /Refused by Slurm\s+no job was created/);
  assert.equal(await page.getByRole('table', { name: 'Replicas' }).locator('tr').nth(1).locator('li.done').count(), 0);
  await axe(page, 'a deployment with a refused job');
  await shot('page-refused');

  // paused, nothing is submitted again, so the message stays gone once dismissed
  await pressWithKeyboard(page, 'Pause');
  await page.getByRole('button', { name: 'Resume' }).waitFor();
  await alert.waitFor();
  await pressWithKeyboard(page, 'Dismiss');
  await alert.waitFor({ state: 'detached' });
  await page.getByText('Dismissed').waitFor();
  assert.equal((await stack.api('GET', `/api/v1/models/${m.id}/managed`)).json.provision_error, null);
  await shot('dismissed');
  await page.goto('/deployments');
  await page.getByRole('row', { name: /refused-web/ }).waitFor();
  assert.equal(await page.getByRole('row', { name: /refused-web/ }).getByText('Invalid partition name specified').count(), 0);
  assertClean(rec);
});

test('a never-healthy engine becomes lost; Try once more submits it again', { skip }, async () => {
  const id = await launchSmoke(stack, 'lost-web', { replicas: 1, inputs: { mode: 'never-healthy' },
    health: { interval: 1, timeout: 1, startup_grace: 3, failure_threshold: 2 } });
  const { page, rec, shot } = await newPage(b, stack, 'lost');
  await signIn(page, stack);
  await page.goto(`/deployments/${id}`);
  await page.getByRole('heading', { level: 1, name: 'lost-web' }).waitFor();
  await shot('coming-up');
  const lost = page.getByRole('alert').filter({ hasText: '1 replica lost' });
  await lost.waitFor({ timeout: 150000 });
  // the state in words (docs/replicas-and-failures.md), never its raw name
  const lostRow = page.getByRole('table', { name: 'Replicas' }).locator('p.off.lost');
  await lostRow.waitFor();
  assert.match(await lostRow.innerText(), /^Lost ended too often in a row, not replaced until “Try once more”/);
  assert.equal(await lost.getByRole('link', { name: /Replicas and failures/ }).getAttribute('href'), '/docs/replicas-and-failures#backoff-and-lost-replicas');
  await shot('lost');
  await axe(page, 'a deployment with a lost replica');
  assert.equal((await liveJobs(stack, id)).length, 0, 'a lost replica holds no job');
  const history = page.getByRole('table', { name: 'Launch history' });
  await history.getByText(/job \d+/).first().waitFor();

  await pressWithKeyboard(page, 'Try once more');
  await page.getByText('Trying once more').waitFor();
  await lost.waitFor({ state: 'detached', timeout: 20000 });
  await until(async () => (await liveJobs(stack, id)).length === 1, { timeout: 30000, what: 'a new job after Try once more' });
  await page.getByRole('table', { name: 'Replicas' }).getByRole('listitem').filter({ hasText: /Queued in Slurm|Starting/ })
    .and(page.locator('[aria-current="step"]')).first().waitFor({ timeout: 30000 });
  await shot('trying-again');
  assert.ok((await replicasOf(stack, id)).some((r) => ['submitted', 'starting'].includes(r.state)));
  await stack.api('DELETE', `/api/v1/models/${id}/managed`);
  assertClean(rec);
});

test('a job Slurm keeps pending shows its state and Slurm\'s reason on the replica', { skip }, async () => {
  // debug allows 30 minutes: a 2-hour job is accepted and pends (EnforcePartLimits is unset on the harness);
  // the API would refuse it at the field (?check=false stores it unchecked, as an older obleth did)
  const m = (await stack.api('POST', '/api/v1/models', { name: 'pending-web' })).json;
  const put = await stack.api('PUT', `/api/v1/models/${m.id}/managed?check=false`, { partition: 'debug', account: 'research',
    replicas: 1, time_limit: 120, launch_command: 'sleep 600' });
  assert.equal(put.status, 201, put.text);
  const { page, rec, shot } = await newPage(b, stack, 'pending');
  await signIn(page, stack);
  await page.goto(`/deployments/${m.id}`);
  const row = page.getByRole('table', { name: 'Replicas' }).getByRole('row').filter({ hasText: 'PENDING' });
  await row.getByText('PartitionTimeLimit', { exact: true }).waitFor({ timeout: 30000 });
  await row.getByText(/^Slurm will never start this job/).waitFor(); // the provisioner's word on it
  const current = row.locator('[aria-current="step"]');
  assert.match(await current.innerText(), /Queued in Slurm/);
  const jobs = await liveJobs(stack, m.id);
  assert.equal(jobs.length, 1);
  await row.getByRole('cell', { name: String(jobs[0].job_id), exact: true }).waitFor();
  await shot('pending-reason');
  await axe(page, 'a deployment with a pending job');
  await stack.api('DELETE', `/api/v1/models/${m.id}/managed`);
  assertClean(rec);
});
