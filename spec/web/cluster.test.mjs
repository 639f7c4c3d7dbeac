// The Cluster page: partitions with their limits and who may use them, the harness's nodes with their
// state and GPUs free and used per type, and obleth's own jobs with Slurm's reason and start.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { ROOT, newPage, axe, signIn, assertClean, clusterEnv, launchSmoke, until, liveJobs, startHarnessStack, stopHarnessStack } from './support.mjs';

const env = clusterEnv();
const skip = !env && 'the harness cluster is not up (spec/cluster/up.sh)';
let stack;
let b;
before(async () => ({ stack, b } = await startHarnessStack({ interval: '1' })));
after(() => stopHarnessStack(stack, b));

// the harness's nodes as scontrol says them (independent of obleth): name -> {gpuType, total}; through
// spec/cluster/slurm.sh, which runs scontrol inside the 24.11 / 26.05 root (this machine's 22.05
// scontrol cannot talk to them)
function scontrolNodes() {
  const out = execFileSync(path.join(ROOT, 'spec', 'cluster', 'slurm.sh'), ['scontrol', '-o', 'show', 'node'],
    { env: { ...process.env, ...env }, encoding: 'utf8' });
  const nodes = {};
  for (const line of out.trim().split('\n')) {
    const name = /NodeName=(\S+)/.exec(line)[1];
    const g = /Gres=gpu:([^:\s]+):(\d+)/.exec(line);
    nodes[name] = g ? { type: g[1], total: Number(g[2]) } : null;
  }
  return nodes;
}

test('the Cluster page lists the harness\'s nodes with GPUs free and used, the partitions, and obleth\'s jobs', { skip }, async () => {
  const { page, rec, shot } = await newPage(b, stack, 'cluster');
  await signIn(page, stack);
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Cluster' }).click();
  await page.getByRole('heading', { level: 1, name: 'Cluster' }).waitFor();
  const nodes = page.getByRole('table', { name: 'Nodes' });
  await nodes.waitFor();
  const want = scontrolNodes();
  assert.ok(Object.keys(want).length >= 4, JSON.stringify(want));
  for (const [name, g] of Object.entries(want)) {
    const row = nodes.getByRole('row', { name: new RegExp(`^${name}\\b`) });
    await row.waitFor();
    if (g) assert.match(await row.innerText(), new RegExp(`${g.type}: \\d+ used, \\d+ free of ${g.total}`));
  }
  const parts = page.getByRole('table', { name: 'Partitions' });
  await parts.getByRole('row', { name: /^gpu/ }).waitFor();
  await page.getByText('obleth has no job in the queue or running.').waitFor();
  await shot('idle');
  await axe(page, 'the Cluster page');

  // a job of obleth's shows up live, with its model and state; its GPU is counted as used
  const id = await launchSmoke(stack, 'cluster-web', { replicas: 1, gpus_per_node: 1, gpu_type: 'h100', partition: 'gpu' });
  await until(async () => (await liveJobs(stack, id)).length === 1, { timeout: 60000, what: 'the job in Slurm' });
  const jobs = page.getByRole('table', { name: "obleth's jobs" });
  const jobRow = jobs.getByRole('row', { name: /cluster-web/ });
  await jobRow.waitFor({ timeout: 30000 });
  assert.match(await jobRow.innerText(), /RUNNING|PENDING/);
  await nodes.getByRole('row', { name: /^n3\b/ }).getByText(/h100: 1 used, 7 free of 8/).waitFor({ timeout: 30000 });
  await shot('with-a-job');
  await stack.api('DELETE', `/api/v1/models/${id}/managed`);
  await page.getByText('obleth has no job in the queue or running.').waitFor({ timeout: 60000 });
  assertClean(rec);
});
