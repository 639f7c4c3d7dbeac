// New deployment: Library → smoke-test; the partition list with fit and idle counts; an account that
// takes a partition away; a QoS the partition refuses shown at its field before Review; Edit as › YAML
// both ways (a changed line is "changed by you" in the form, a bad key's diagnostic on its line);
// Review with the job script and the slurmrestd body; Launch with "Also save these settings as a recipe"
// → the deployment page, replicas healthy, a chat completion answering. Keyboard only where it matters.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { newPage, axe, signIn, assertClean, clusterEnv, until, replicasOf, waitInPage, pressWithKeyboard,
  startHarnessStack, stopHarnessStack } from './support.mjs';

const env = clusterEnv();
let stack;
let b;
before(async () => ({ stack, b } = await startHarnessStack({ interval: '1' })));
after(() => stopHarnessStack(stack, b));

const skip = !env && 'the harness cluster is not up (spec/cluster/up.sh)';

test('Library → smoke-test: partitions with fit and idle counts, account and QoS checked at their fields, YAML, Review, Launch and save as a recipe',
  { skip }, async () => {
    const { page, rec, shot } = await newPage(b, stack, 'new-deployment');
    await signIn(page, stack);
    await page.getByRole('link', { name: 'New deployment' }).click();
    await page.waitForURL('**/deployments/new');
    const library = page.getByRole('tabpanel', { name: 'Library' });
    await library.getByText('Smoke test').waitFor();
    await shot('pick');
    await axe(page, 'step 1: pick what to run');

    // keyboard: Tab to "Use Smoke test" and press Enter
    await library.getByRole('button', { name: 'Use Smoke test' }).focus();
    await page.keyboard.press('Enter');
    const parts = page.getByRole('group', { name: 'Partition' });
    await parts.getByRole('radio', { name: /^gpu/ }).waitFor();
    // each partition says whether a replica fits and how many fitting nodes are idle (harness: gpu n0–n3, debug n0)
    assert.match(await parts.getByText(/^gpu/).first().locator('..').innerText(), /gpu.*fits · 4 of 4 fitting nodes idle/);
    assert.match(await parts.locator('label', { hasText: 'debug' }).innerText(), /debug — fits · 1 of 1 fitting nodes idle/);
    assert.equal(await parts.getByRole('radio', { name: /^gpu/ }).isChecked(), true);
    // the group-restricted partition is never offered, shown with its reason
    assert.equal(await parts.getByRole('radio', { name: /^staff/ }).count(), 0);
    assert.match(await parts.getByRole('list', { name: 'Partitions not offered' }).innerText(), /staff: partition staff takes only members of obleth-staff/);
    // provenance next to each value
    const acct = page.locator('[data-field="account"]');
    assert.match(await acct.innerText(), /cluster default/);
    assert.match(await page.locator('[data-field="time_limit"]').innerText(), /recipe/);
    await shot('form');
    await axe(page, 'step 2: the form');

    // account teaching: debug is no longer offered
    await page.getByLabel('Account', { exact: true }).selectOption('teaching');
    await until(async () => (await parts.getByRole('radio', { name: /^debug/ }).count()) === 0, { what: 'debug removed for teaching' });
    assert.match(await parts.getByRole('list', { name: 'Partitions not offered' }).innerText(), /debug: partition debug does not take account teaching/);
    assert.match(await acct.innerText(), /changed by you/);
    await shot('account-teaching');
    // back to the default account (keyboard: the "Use default" button)
    await acct.getByRole('button', { name: 'Use the default for Account' }).focus();
    await page.keyboard.press('Enter');
    await parts.getByRole('radio', { name: /^debug/ }).waitFor();
    assert.match(await acct.innerText(), /cluster default/);

    // inference takes one QoS (AllowQos=inference) that is not the user's default: with QoS left empty the
    // form preselects it (what the cluster decides when nobody did); back on gpu it is unset again
    await parts.getByRole('radio', { name: /^inference/ }).check();
    await page.locator('[data-field="qos"] .prov', { hasText: 'cluster default' }).waitFor();
    assert.equal(await page.getByLabel('QoS', { exact: true }).inputValue(), 'inference');
    await shot('inference-qos');
    await parts.getByRole('radio', { name: /^gpu/ }).check();
    await page.locator('[data-field="qos"] .prov', { hasText: 'not set' }).waitFor();

    // QoS long, then partition debug: the error shows at the QoS field, before Review
    await page.getByLabel('QoS', { exact: true }).selectOption('long');
    await page.locator('[data-field="qos"] .prov', { hasText: 'changed by you' }).waitFor();
    await parts.getByRole('radio', { name: /^debug/ }).check();
    const qosErr = page.locator('[data-field="qos"] .field-error');
    await qosErr.waitFor();
    assert.match(await qosErr.innerText(), /partition debug does not take QoS "long"/);
    assert.equal(await page.getByLabel('QoS', { exact: true }).getAttribute('aria-invalid'), 'true');
    await shot('qos-error');
    await axe(page, 'step 2 with a field error');
    // Review refuses while a field is wrong and puts focus on it
    await page.getByRole('button', { name: 'Review' }).click();
    await page.getByText(/Fix the problem shown at the fields first/).waitFor();
    assert.equal(await page.evaluate(() => document.activeElement.id), 'f-qos');
    // a walltime above debug's MaxTime (30 min) is an error at the walltime field
    await page.getByLabel('QoS', { exact: true }).selectOption('normal');
    await page.getByLabel('Walltime', { exact: true }).fill('1:00:00');
    const tlErr = page.locator('[data-field="time_limit"] .field-error');
    await tlErr.waitFor();
    assert.match(await tlErr.innerText(), /30/);
    assert.equal(await qosErr.count(), 0);
    await shot('walltime-error');
    await page.getByLabel('Walltime', { exact: true }).fill('20');
    await tlErr.waitFor({ state: 'detached' });

    // the rollover margin says what an empty one means and its bounds, in the server's numbers (the
    // rollover policy's 5 min, the managed spec's 0..10080)
    assert.match(await page.locator('[data-field="rollover_margin"] .help').innerText(), /Empty: 5 min\. \(0–10080\)/);

    // Edit as › YAML: the same settings as text; a changed line is "changed by you" in the form
    await page.getByRole('button', { name: 'Edit as › YAML' }).click();
    const ta = page.getByLabel('Settings as YAML');
    const text = await ta.inputValue();
    assert.match(text, /^partition: "debug"$/m);
    assert.match(text, /^qos: "normal"$/m);
    assert.match(text, /^time_limit: "?20"?$/m);
    await ta.fill(text.replace(/^replicas: 1$/m, 'replicas: 2'));
    await page.getByText('No problems · 4 settings changed by you').waitFor();
    await page.locator('.preview-status', { hasText: 'Ready to review' }).waitFor();
    await shot('yaml');
    await axe(page, 'Edit as YAML');
    // a bad key on line 3: its diagnostic on line 3
    const lines = (await ta.inputValue()).split('\n');
    lines.splice(2, 0, 'bogus_key: 1');
    await ta.fill(lines.join('\n'));
    const diag = page.getByRole('list', { name: 'Problems in the YAML' });
    await diag.waitFor();
    assert.match(await diag.innerText(), /^Line 3, column 1: unknown key bogus_key/);
    assert.equal(await page.locator('.gutter li[data-line="3"]').getAttribute('class'), 'bad');
    assert.match(await page.locator('.line-notes li[data-line="3"]').innerText(), /unknown key bogus_key/);
    // Review waits until the YAML is fixed
    await page.getByRole('button', { name: 'Review' }).click();
    await page.getByText('Fix the YAML first: each problem is shown on its line.').waitFor();
    await shot('yaml-bad-key');
    // switching to the form and back loses nothing: the form says the YAML has problems, the text is kept
    await page.getByRole('button', { name: 'Edit as › YAML' }).click();
    await page.getByText(/The YAML has problems: the form shows the last settings that checked/).waitFor();
    assert.equal(await page.getByLabel('Replicas', { exact: true }).inputValue(), '2');
    await page.getByRole('button', { name: 'Edit as › YAML' }).click();
    assert.match(await ta.inputValue(), /^bogus_key: 1$/m);
    await diag.waitFor();
    lines.splice(2, 1);
    await ta.fill(lines.join('\n'));
    await page.getByText('No problems · 4 settings changed by you').waitFor();
    // back to the form: nothing lost, replicas changed by you
    await page.getByRole('button', { name: 'Edit as › YAML' }).click();
    assert.equal(await page.getByLabel('Replicas', { exact: true }).inputValue(), '2');
    assert.match(await page.locator('[data-field="replicas"]').innerText(), /changed by you/);
    assert.equal(await parts.getByRole('radio', { name: /^debug/ }).isChecked(), true);

    // Review: the job script and the slurmrestd body with the chosen values
    await page.getByLabel('API model name').fill('smoke-new');
    await page.locator('.preview-status', { hasText: 'Ready to review' }).waitFor();
    await page.getByRole('button', { name: 'Review' }).focus();
    await page.keyboard.press('Enter');
    const script = page.getByLabel('Job script (read-only)');
    await script.waitFor();
    assert.match(await script.innerText(), /smoke-engine/);
    const body = JSON.parse(await page.getByLabel('slurmrestd request (read-only)').innerText());
    const job = body.job || body.jobs[0];
    assert.equal(job.partition, 'debug');
    assert.equal(job.account, 'research');
    assert.equal(job.qos, 'normal');
    assert.deepEqual(job.time_limit.number ?? job.time_limit, 20);
    await shot('review');
    await axe(page, 'step 3: review');

    await page.getByLabel('Also save these settings as a recipe').check();
    await page.getByLabel('Recipe id').fill('smoke-debug');
    await page.getByLabel('Recipe name').fill('Smoke on debug');
    await shot('review-save');
    await page.getByRole('button', { name: 'Launch' }).click();
    await page.waitForURL(/\/deployments\/\d+$/);
    const id = page.url().split('/').pop();
    await page.getByRole('heading', { level: 1, name: 'smoke-new' }).waitFor();
    await page.getByRole('region', { name: 'Status' }).getByText('2 of 2 replicas healthy').waitFor({ timeout: 120000 });
    await shot('launched');
    const saved = await stack.api('GET', '/api/v1/recipes/smoke-debug');
    assert.equal(saved.status, 200, saved.text);
    assert.equal(saved.json.name, 'Smoke on debug');
    assert.equal((await replicasOf(stack, id)).filter((r) => r.state === 'healthy').length, 2);

    // a chat completion through obleth answers
    const key = (await stack.api('POST', '/api/v1/keys', { name: 'new-deployment test' })).json.key;
    const chat = await fetch(`${stack.base}/v1/chat/completions`, { method: 'POST',
      headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: 'smoke-new', messages: [{ role: 'user', content: 'hello' }] }) });
    assert.equal(chat.status, 200);
    assert.ok((await chat.json()).choices[0].message.content);

    // the saved recipe is under Saved
    await page.goto('/deployments/new');
    // (step 1 opens on the Saved tab once there are saved recipes)
    await page.getByRole('tab', { name: 'Saved', selected: true }).waitFor();
    await page.getByRole('tabpanel', { name: 'Saved' }).getByText('Smoke on debug').waitFor();
    await shot('saved-listed');
    assert.ok(await waitInPage(page, () => document.querySelectorAll('[aria-current="step"]').length === 1, 'step marker'));
    assertClean(rec);
  });

test('keyboard only: Tab to Use Smoke test, Review and Launch; the deployment page opens', { skip }, async () => {
  const { page, rec, shot } = await newPage(b, stack, 'new-deployment-keyboard');
  await signIn(page, stack);
  await page.goto('/deployments/new');
  // step 1's tabs by keyboard: Tab reaches the chosen tab (Saved, once a recipe is saved), arrows choose Library
  const chosen = page.getByRole('tablist', { name: 'What to run' }).getByRole('tab', { selected: true });
  await chosen.waitFor();
  const first = await chosen.innerText();
  if (first !== 'Library') {
    assert.equal(first, 'Saved');
    await pressWithKeyboard(page, 'Saved', { key: 'ArrowRight' });
  }
  await page.getByRole('tab', { name: 'Library', selected: true }).waitFor();
  await page.getByRole('button', { name: 'Use Smoke test' }).waitFor();
  await pressWithKeyboard(page, 'Use Smoke test');
  await page.getByRole('group', { name: 'Partition' }).waitFor();
  // the name field: Tab to it, type a new name
  // no layout jump while the preview refreshes: the fields below stay where they are, frame by frame
  await page.evaluate(() => {
    window.__tops = [];
    const el = document.querySelector('[data-field="nodes"]');
    const tick = () => { window.__tops.push(Math.round(el.getBoundingClientRect().top + window.scrollY)); if (window.__tops.length < 100000) requestAnimationFrame(tick); };
    tick();
  });
  await page.getByLabel('API model name').focus();
  await page.keyboard.press('Control+A');
  await page.keyboard.type('smoke-keys', { delay: 80 });
  await page.locator('[data-field="api_model_name"] .prov', { hasText: 'changed by you' }).waitFor();
  await page.locator('.preview-status', { hasText: 'Ready to review' }).waitFor();
  const tops = await page.evaluate(() => window.__tops);
  assert.ok(tops.length > 5, 'frames recorded');
  assert.deepEqual([...new Set(tops)], [tops[0]], 'the form did not move while the preview refreshed');
  await shot('form');
  await pressWithKeyboard(page, 'Review', { max: 200 });
  await page.getByLabel('Job script (read-only)').waitFor();
  await shot('review');
  await pressWithKeyboard(page, 'Launch', { max: 200 });
  await page.getByRole('heading', { level: 1, name: 'smoke-keys' }).waitFor();
  assert.match(page.url(), /\/deployments\/\d+$/);
  await shot('launched');
  assertClean(rec);
});
