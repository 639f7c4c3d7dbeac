// A model launched through the API: it shows on Deployments; its page shows each
// replica come up live and the model become active; Restart, Pause / Resume,
// turning Slurm off with replicas running (asks first, with the count; cancel keeps
// it on), and Stop launching — each action done with the keyboard alone.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { newPage, axe, signIn, assertClean, clusterEnv, until, pressWithKeyboard, launchSmoke, replicasOf,
  liveJobs, recordReplicaStates, shownAt, watchApiStates, waitInPage, startHarnessStack, stopHarnessStack } from './support.mjs';

const env = clusterEnv();
let stack;
let b;
before(async () => ({ stack, b } = await startHarnessStack({ interval: '1' })));
after(() => stopHarnessStack(stack, b));

const rowOf = (page, slot) => page.getByRole('table', { name: 'Replicas' }).getByRole('row').filter({
  has: page.getByRole('rowheader', { name: String(slot), exact: true }) });

test('a launched model comes up live on its deployment page; restart, pause, resume, Slurm off asks first, stop launching',
  { skip: !env && 'the harness cluster is not up (spec/cluster/up.sh)' }, async () => {
    const { page, rec, shot } = await newPage(b, stack, 'deployment');
    await signIn(page, stack);
    await page.getByText('No models yet').waitFor();

    // launched through the API while the page is open: it appears without a reload
    const id = await launchSmoke(stack, 'smoke-web', { replicas: 2, inputs: { startup_delay: 4 } });
    const apiStates = watchApiStates(stack, id);
    const link = page.getByRole('link', { name: 'smoke-web' });
    await link.waitFor();
    await page.getByRole('row', { name: /smoke-web/ }).getByText('staged').waitFor();
    await shot('deployments-staged');
    await axe(page, 'Deployments with a model');

    await link.click();
    await page.waitForURL(`**/deployments/${id}`);
    await page.getByRole('heading', { level: 1, name: 'smoke-web' }).waitFor();
    const seen = await recordReplicaStates(page);
    await shot('deployment-coming-up');
    await axe(page, 'the deployment page');

    await page.getByRole('region', { name: 'Status' }).getByText('2 of 2 replicas healthy').waitFor({ timeout: 90000 });
    await page.getByRole('region', { name: 'Status' }).getByText('active', { exact: true }).waitFor();
    const states = await seen();
    // each step the API reports shows on the page without a reload: waited for above (both healthy) and
    // recorded by the page itself; how long after the API each one showed is a benchmark, not a test
    // (spec/bench/web_live.mjs, make bench)
    const apiAt = await apiStates();
    const pageAt = await shownAt(page);
    assert.ok(apiAt['1:healthy'] && apiAt['2:healthy'], 'the API had both replicas healthy');
    assert.ok(pageAt['1:healthy'] && pageAt['2:healthy'], 'both replicas shown healthy');
    for (const slot of ['1', '2']) {
      assert.equal(states[slot].at(-1), 'healthy', `replica ${slot}: ${states[slot]}`);
      assert.ok(states[slot].length >= 2, `replica ${slot} was seen on its way, not only healthy: ${states[slot]}`);
      for (const s of states[slot]) assert.ok(['pending', 'submitted', 'starting', 'healthy'].includes(s), `replica ${slot}: ${states[slot]}`);
    }
    const r1 = rowOf(page, 1);
    await r1.getByRole('listitem').filter({ hasText: 'Healthy' }).waitFor();
    // the spec's time limit in the form's word (DESIGN: walltime)
    assert.equal(await page.getByRole('term').filter({ hasText: /^Walltime$/ }).count(), 1);
    assert.equal(await page.getByRole('term').filter({ hasText: /^Time limit$/ }).count(), 0);
    await shot('deployment-healthy');
    const how = page.getByRole('region', { name: 'How clients call it' });
    assert.match(await how.innerText(), new RegExp(`${stack.base.replace(/[.:/]/g, '\\$&')}/v1/chat/completions`));
    assert.match(await how.innerText(), /"model":"smoke-web"/);
    // the curl line the page shows, run as shown with a client key, gets a chat completion through obleth
    const key = (await stack.api('POST', '/api/v1/keys', { name: 'curl from the page' })).json.key;
    const line = await how.getByLabel('curl example').innerText();
    const answer = JSON.parse(execFileSync('sh', ['-c', line], { env: { ...process.env, OBLETH_API_KEY: key } }).toString());
    assert.ok(answer.choices && answer.choices[0].message.content, JSON.stringify(answer));

    // Restart replica 1, keyboard only: a new job id, healthy again
    const before1 = (await replicasOf(stack, id)).find((r) => r.slot === 1 && r.state === 'healthy');
    await pressWithKeyboard(page, `Restart replica 1 (job ${before1.job_id})`);
    // it asks first, naming the job and what the model keeps meanwhile; focus starts on Cancel
    const askRestart = page.getByRole('dialog', { name: 'Restart replica 1?' });
    await askRestart.waitFor();
    assert.match(await askRestart.innerText(), new RegExp(`Job ${before1.job_id} is cancelled now`));
    assert.match(await askRestart.innerText(), /has 1 healthy replica\./);
    await shot('restart-confirm');
    await page.keyboard.press('Escape');
    await askRestart.waitFor({ state: 'detached' });
    assert.equal((await replicasOf(stack, id)).find((r) => r.slot === 1 && r.state === 'healthy').job_id, before1.job_id);
    await pressWithKeyboard(page, `Restart replica 1 (job ${before1.job_id})`);
    await askRestart.waitFor();
    await page.keyboard.press('Tab'); // Cancel → Restart
    await page.keyboard.press('Enter');
    await page.getByText('Restart asked for replica 1').waitFor();
    await shot('restart-asked');
    const after1 = await until(async () => (await replicasOf(stack, id)).find((r) => r.slot === 1 && r.state === 'healthy' && r.job_id !== before1.job_id),
      { timeout: 90000, what: 'a new healthy job for replica 1' });
    await r1.getByRole('cell', { name: String(after1.job_id), exact: true }).waitFor({ timeout: 5000 });
    await r1.getByRole('button', { name: `Restart replica 1 (job ${after1.job_id})` }).waitFor();
    await shot('restarted');

    // Slurm off while replicas run: asks first with the count; Cancel keeps it on
    await page.goto('/deployments?slurm=1');
    const sheet = page.getByRole('dialog', { name: 'Slurm connection' });
    await sheet.getByLabel('Slurm enabled').uncheck();
    await sheet.getByRole('button', { name: 'Save' }).click();
    const ask = page.getByRole('dialog', { name: 'Turn Slurm off?' });
    await ask.waitFor();
    assert.match(await ask.innerText(), /2 replicas hold Slurm jobs right now/);
    assert.match(await ask.innerText(), /cancels their jobs on its next pass/);
    await shot('slurm-off-asks');
    await axe(page, 'the turn-Slurm-off confirmation');
    await ask.getByRole('button', { name: 'Cancel' }).click();
    await ask.waitFor({ state: 'detached' });
    // focus goes back to where it was before the question: the sheet's Save
    await waitInPage(page, () => document.activeElement && document.activeElement.textContent === 'Save', 'focus back on Save');
    await page.keyboard.press('Escape');
    await sheet.waitFor({ state: 'detached' });
    assert.equal((await stack.api('GET', '/api/v1/settings/slurm')).json.enabled, true);
    await page.getByRole('region', { name: 'Slurm' }).getByText('Enabled').waitFor();
    await shot('slurm-still-on');

    // Pause (keyboard): both jobs cancelled in Slurm; Resume brings two back
    await page.goto(`/deployments/${id}`);
    await page.getByRole('button', { name: 'Pause' }).waitFor();
    await pressWithKeyboard(page, 'Pause');
    await page.getByRole('region', { name: 'Status' }).getByText('paused', { exact: true }).waitFor();
    await until(async () => (await liveJobs(stack, id)).length === 0, { timeout: 60000, what: 'both jobs cancelled' });
    await page.getByRole('region', { name: 'Status' }).getByText('0 of 2 replicas healthy').waitFor({ timeout: 20000 });
    await page.getByRole('region', { name: 'Status' }).getByText(/paused: no job is submitted until you resume it/).waitFor();
    await page.getByRole('region', { name: 'Status' }).getByText('staged', { exact: true }).waitFor();
    await shot('paused');
    await pressWithKeyboard(page, 'Resume');
    await page.getByRole('region', { name: 'Status' }).getByText('2 of 2 replicas healthy').waitFor({ timeout: 90000 });
    assert.equal((await liveJobs(stack, id)).length, 2);
    await shot('resumed');

    // confirmed, Slurm goes off (the provisioner cancels the jobs on its next pass); turned on again, it does not ask
    await page.goto('/deployments?slurm=1');
    const sheet2 = page.getByRole('dialog', { name: 'Slurm connection' });
    await sheet2.getByLabel('Slurm enabled').uncheck();
    await sheet2.getByRole('button', { name: 'Save' }).click();
    await ask.waitFor();
    await ask.getByRole('button', { name: 'Turn Slurm off' }).click();
    await sheet2.waitFor({ state: 'detached' });
    const card = page.getByRole('region', { name: 'Slurm' });
    await card.getByText('no — the provisioner submits nothing').waitFor();
    assert.equal((await stack.api('GET', '/api/v1/settings/slurm')).json.enabled, false);
    await shot('slurm-off');
    await card.getByRole('link', { name: 'Slurm connection' }).click();
    await sheet2.getByLabel('Slurm enabled').check();
    await sheet2.getByRole('button', { name: 'Save' }).click();
    await sheet2.waitFor({ state: 'detached' });
    await card.getByText('Enabled').waitFor();
    assert.equal((await stack.api('GET', '/api/v1/settings/slurm')).json.enabled, true);

    // Stop launching: asks, then the jobs go and the page says the model is stopped
    await page.goto(`/deployments/${id}`);
    await page.getByRole('button', { name: 'Stop launching' }).waitFor();
    await pressWithKeyboard(page, 'Stop launching');
    const stop = page.getByRole('dialog', { name: 'Stop launching smoke-web?' });
    await stop.waitFor();
    assert.equal(await page.evaluate(() => document.activeElement.textContent), 'Cancel', 'focus starts on Cancel');
    await shot('stop-asks');
    await axe(page, 'the stop-launching confirmation');
    await page.keyboard.press('Tab');
    await page.keyboard.press('Enter');
    await stop.waitFor({ state: 'detached' });
    await page.getByText(/^Stopped: obleth launches nothing for this model/).waitFor();
    await until(async () => (await liveJobs(stack, id)).length === 0, { timeout: 60000, what: 'the jobs cancelled after Stop launching' });
    await shot('stopped');

    await page.getByRole('table', { name: 'Launch history' }).getByText('#1').waitFor();
    assertClean(rec);
  });
