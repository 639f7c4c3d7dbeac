// Review before Slurm is connected: the job script with the values filled in, and where the request to
// slurmrestd would be, a sentence saying it is not known until Slurm is connected (no "/slurm/null/" and
// no "null" body); the preview's placeholders note says which parts are filled in at submit.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startStack, browser, newPage, axe, signIn, assertClean, clusterEnv, portRange } from './support.mjs';

const env = clusterEnv();
let stack;
let b;
before(async () => {
  if (!env) return;
  stack = await startStack({ provisioner: false });
  // Cluster defaults saved, no connection yet
  const r = await stack.api('PUT', '/api/v1/settings/slurm', { enabled: false,
    defaults: { partition: 'gpu', account: 'research', log_dir: stack.logdir, port_range: portRange() } });
  assert.equal(r.status, 200, r.text);
  b = await browser();
});
after(async () => {
  if (b) await b.close();
  if (stack) await stack.stop();
});

test('Review with no Slurm connection: the request is "not known until Slurm is connected", and the placeholders are named',
  { skip: !env && 'the harness cluster is not up (spec/cluster/up.sh)' }, async () => {
    const { page, rec, shot } = await newPage(b, stack, 'new-deployment-review');
    await signIn(page, stack);
    await page.goto('/deployments/new');
    await page.getByRole('button', { name: 'Use Smoke test' }).click();
    await page.locator('.preview-status', { hasText: 'Ready to review' }).waitFor();
    await page.getByRole('button', { name: 'Review' }).click();
    const script = page.getByLabel('Job script (read-only)');
    await script.waitFor();
    assert.match(await script.innerText(), /smoke-engine/);

    const sent = page.getByRole('region', { name: 'Sent to slurmrestd' });
    await sent.getByText('not known until Slurm is connected').waitFor();
    const text = await sent.innerText();
    assert.ok(!/null/.test(text), `null pieces shown: ${text}`);
    assert.equal(await sent.getByRole('button', { name: 'Copy the request' }).count(), 0);
    assert.equal(await page.getByLabel('slurmrestd request (read-only)').count(), 0);
    assert.equal(await sent.getByRole('link', { name: 'Set up Slurm' }).getAttribute('href'), '/deployments?slurm=1');

    const note = page.getByText('The job name, comment and port are fixed per replica when the provisioner submits it.');
    await note.waitFor();
    assert.match(await note.innerText(), /model id 0 \(the model's id once launched\), replica slot 1, nonce 0{16}/);
    assert.ok(!(await page.locator('main').innerText()).includes('/slurm/null/'));
    await shot('review-no-connection');
    await axe(page, 'Review with no Slurm connection');
    assertClean(rec);
  });
