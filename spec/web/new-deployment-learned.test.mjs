// Launching a saved recipe again: its account and QoS start "Learned from past launches" (its newest three
// launches all used them); a launch that ended in TIMEOUT makes "From past runs" offer a longer walltime
// with its evidence, and the walltime changes only after it is picked, saying what changed.
// The launches are made through the API with the provisioner off (nothing is submitted); the job outcome
// is recorded as the provisioner records it, through POST /api/v1/provisioner/report.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { newPage, axe, signIn, assertClean, clusterEnv, startHarnessStack, stopHarnessStack } from './support.mjs';

const env = clusterEnv();
let stack;
let b;
before(async () => ({ stack, b } = await startHarnessStack({ provisioner: false })));
after(() => stopHarnessStack(stack, b));

async function launch(body) {
  const r = await stack.api('POST', '/api/v1/deployments/launch', body);
  assert.equal(r.status, 201, r.text);
  return r.json.model.id;
}

test('a saved recipe launched again starts with the learned account and QoS; a TIMEOUT suggests a longer walltime, applied only when picked',
  { skip: !env && 'the harness cluster is not up (spec/cluster/up.sh)' }, async () => {
    const values = { account: 'teaching', qos: 'long' };
    await launch({ recipe_id: 'smoke-test', api_model_name: 'mine-1', values, save_recipe: { id: 'smoke-mine', name: 'My smoke' } });
    // learned needs the recipe's newest three launches (docs/launch.md): the saved recipe's own
    await launch({ recipe_id: 'smoke-mine', api_model_name: 'mine-2', values });
    await launch({ recipe_id: 'smoke-mine', api_model_name: 'mine-2b', values });
    const last = await launch({ recipe_id: 'smoke-mine', api_model_name: 'mine-3', values });
    // the last launch's job hit its time limit (30 min, the recipe's)
    const rep = await stack.api('POST', '/api/v1/provisioner/report', { pass: { started_at: 1, duration: 1 },
      replicas: [{ nonce: '00000000000a0b01', model_id: last, slot: 1, state: 'ended' }],
      outcomes: [{ nonce: '00000000000a0b01', model_id: last, job_id: 4242, state: 'TIMEOUT', exit_code: 0, node: 'n1' }] });
    assert.equal(rep.status, 200, rep.text);

    const { page, rec, shot } = await newPage(b, stack, 'new-deployment-learned');
    await signIn(page, stack);
    await page.goto('/deployments/new');
    await page.getByRole('tabpanel', { name: 'Saved' }).getByRole('button', { name: 'Use My smoke' }).click();
    await page.getByRole('group', { name: 'Partition' }).waitFor();
    const acct = page.locator('[data-field="account"]');
    const qos = page.locator('[data-field="qos"]');
    assert.equal(await page.getByLabel('Account', { exact: true }).inputValue(), 'teaching');
    assert.match(await acct.locator('.prov').innerText(), /Learned from past launches/);
    assert.equal(await page.getByLabel('QoS', { exact: true }).inputValue(), 'long');
    assert.match(await qos.locator('.prov').innerText(), /Learned from past launches/);

    // From past runs: a longer walltime, with the launch, job, end state and node
    const past = page.getByRole('region', { name: 'From past runs' });
    const item = past.getByRole('listitem').filter({ has: page.getByRole('button', { name: /^Apply/ }) }).first();
    await item.waitFor();
    assert.match(await item.getByRole('list', { name: 'Evidence' }).innerText(), /job 4242\s+TIMEOUT.*on n1/);
    // nothing applied yet
    const tl = page.getByLabel('Walltime', { exact: true });
    assert.equal(await tl.inputValue(), '30');
    assert.match(await page.locator('[data-field="time_limit"] .prov').innerText(), /recipe/);
    await shot('suggestion');
    await axe(page, 'From past runs');
    await item.getByRole('button', { name: /^Apply/ }).focus();
    await page.keyboard.press('Enter');
    await past.getByText('Applied: Walltime 30 → 60').waitFor();
    assert.equal(await tl.inputValue(), '60');
    assert.match(await page.locator('[data-field="time_limit"] .prov').innerText(), /changed by you/);
    await shot('suggestion-applied');
    assertClean(rec);
  });
