// Edit a running deployment from its page through the New deployment form: the spec's own values show
// as "changed by you"; an account the partition does not take is not offered, and typed in Edit as YAML is
// refused on its line and the running
// replica is untouched; a good change is saved (PUT /models/{id}/managed) and the page returns.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { newPage, axe, signIn, assertClean, clusterEnv, until, launchSmoke, replicasOf, liveJobs,
  startHarnessStack, stopHarnessStack } from './support.mjs';

const env = clusterEnv();
let stack;
let b;
before(async () => ({ stack, b } = await startHarnessStack({ interval: '1' })));
after(() => stopHarnessStack(stack, b));

test('editing a running deployment: a refused account shows at its field, the replica is untouched; a good change is saved',
  { skip: !env && 'the harness cluster is not up (spec/cluster/up.sh)' }, async () => {
    const id = await launchSmoke(stack, 'smoke-edit', { partition: 'debug', replicas: 1 });
    const healthy = await until(async () => (await replicasOf(stack, id)).find((r) => r.state === 'healthy'),
      { timeout: 90000, what: 'a healthy replica' });
    const { page, rec, shot } = await newPage(b, stack, 'edit-deployment');
    await signIn(page, stack);
    await page.goto(`/deployments/${id}`);
    await page.getByRole('link', { name: 'Edit settings' }).focus();
    await page.keyboard.press('Enter');
    await page.waitForURL(`**/deployments/${id}?edit=1`);
    await page.getByRole('heading', { level: 1, name: 'Edit smoke-edit' }).waitFor();
    // the address opens the same form when loaded afresh
    await page.goto(`/deployments/${id}?edit=1`);
    await page.getByRole('heading', { level: 1, name: 'Edit smoke-edit' }).waitFor();
    const parts = page.getByRole('group', { name: 'Partition' });
    await parts.getByRole('radio', { name: /^debug/ }).waitFor();
    assert.equal(await parts.getByRole('radio', { name: /^debug/ }).isChecked(), true);
    // the spec's partition differs from the cluster default: the user's
    assert.match(await page.locator('[data-field="partition"]').innerText(), /changed by you/);
    assert.match(await page.locator('[data-field="time_limit"]').innerText(), /recipe/);
    // the model's name does not change here
    assert.equal(await page.getByLabel('API model name').getAttribute('readonly'), '');
    // read-only, so it says no provenance: it is not "changed by you", and has no Use default
    const nameField = page.locator('[data-field="api_model_name"]');
    assert.equal(await nameField.locator('.prov').count(), 0);
    assert.doesNotMatch(await nameField.innerText(), /changed by you|recipe|cluster default|built-in|not set/);
    assert.doesNotMatch(await page.getByLabel('API model name').getAttribute('aria-describedby'), /-prov\b/);
    assert.equal(await page.locator('.prov', { hasText: 'changed by you' }).count(), 1, 'only the partition is the user\'s');
    await shot('form');
    await axe(page, 'Edit settings');

    // only the accounts debug takes are offered: teaching is not
    assert.deepEqual(await page.getByLabel('Account', { exact: true }).locator('option').allInnerTexts(), ['(your default account)', 'research']);
    // typed in Edit as › YAML, account teaching is refused on its line; nothing is saved
    await page.getByRole('button', { name: 'Edit as › YAML' }).click();
    const ta = page.getByLabel('Settings as YAML');
    const lines = (await ta.inputValue()).split('\n');
    const at = lines.findIndex((l) => l.startsWith('account:'));
    assert.ok(at >= 0, 'the account is in the YAML');
    lines[at] = 'account: "teaching"';
    await ta.fill(lines.join('\n'));
    const diag = page.getByRole('list', { name: 'Problems in the YAML' });
    await diag.waitFor();
    assert.match(await diag.innerText(), new RegExp(`^Line ${at + 1}, column 1: partition debug does not take account "teaching"`));
    assert.match(await page.locator(`.line-notes li[data-line="${at + 1}"]`).innerText(), /does not take account/);
    await page.getByRole('button', { name: 'Review' }).click();
    await page.getByText('Fix the YAML first: each problem is shown on its line.').waitFor();
    await shot('account-refused');
    await axe(page, 'Edit settings: YAML with a refused account');
    const spec = (await stack.api('GET', `/api/v1/models/${id}/managed`)).json;
    assert.equal(spec.account, 'research');
    const now = (await replicasOf(stack, id)).filter((r) => r.state === 'healthy');
    assert.deepEqual(now.map((r) => r.job_id), [healthy.job_id], 'the running replica is untouched');
    assert.equal((await liveJobs(stack, id)).length, 1);

    // back to the form: the account is still research
    lines[at] = 'account: "research"';
    await ta.fill(lines.join('\n'));
    // the count is the form's: the spec's partition, not the model's name (read-only, not changed here)
    await page.getByText('No problems · 1 setting changed by you').waitFor();
    await page.getByRole('button', { name: 'Edit as › YAML' }).click();
    assert.equal(await page.getByLabel('Account', { exact: true }).inputValue(), 'research');
    await page.getByLabel('Failures before unhealthy').fill('5');
    await page.locator('[data-field="health.failure_threshold"] .prov', { hasText: 'changed by you' }).waitFor();
    await page.locator('.preview-status', { hasText: 'Ready to review' }).waitFor();
    await page.getByRole('button', { name: 'Review' }).click();
    await page.getByLabel('Job script (read-only)').waitFor();
    assert.equal(await page.getByLabel('Also save these settings as a recipe').count(), 0);
    await shot('review');
    await axe(page, 'Edit settings: review');
    await page.getByRole('button', { name: 'Save changes' }).click();
    await page.waitForURL(new RegExp(`/deployments/${id}$`));
    await page.getByRole('heading', { level: 1, name: 'smoke-edit' }).waitFor();
    const after = (await stack.api('GET', `/api/v1/models/${id}/managed`)).json;
    assert.equal(after.health.failure_threshold, 5);
    assert.equal(after.partition, 'debug');
    assert.equal(after.account, 'research');
    await shot('saved');
    assertClean(rec);
  });
