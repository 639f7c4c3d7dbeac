// New deployment as a person finds it: errors in the words of the page's labels, the header counting
// the YAML's problems (never "Ready to review" while the YAML lists errors), Review saying "1 replica"
// and the walltime as the deployment page says it, "Also save these settings as a recipe" with an id
// already there, and the saved recipe listed with its description, renamed and deleted.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { newPage, axe, signIn, assertClean, clusterEnv, startHarnessStack, stopHarnessStack } from './support.mjs';

const env = clusterEnv();
const skip = !env && 'the harness cluster is not up (spec/cluster/up.sh)';
let stack;
let b;
before(async () => ({ stack, b } = await startHarnessStack({ provisioner: false })));
after(() => stopHarnessStack(stack, b));

test('field errors in the labels\' words, the YAML\'s problems in the header, a saved recipe with its id prefilled, renamed and deleted', { skip }, async () => {
  const { page, rec, shot } = await newPage(b, stack, 'new-deployment-fixes');
  await signIn(page, stack);
  await page.goto('/deployments/new');
  const library = page.getByRole('tabpanel', { name: 'Library' });
  await library.getByRole('button', { name: 'Use Smoke test' }).click();
  await page.getByRole('group', { name: 'Partition' }).getByRole('radio', { name: /^gpu/ }).waitFor();

  // a GPUs-per-node error says "GPUs per node", the field's label, not gpus_per_node
  await page.getByLabel('GPUs per node', { exact: true }).fill('999');
  const gpuErr = page.locator('[data-field="gpus_per_node"] .field-error');
  await gpuErr.waitFor();
  assert.match(await gpuErr.innerText(), /^GPUs per node/);
  assert.doesNotMatch(await gpuErr.innerText(), /gpus_per_node/);
  await shot('label-words');
  await page.getByLabel('GPUs per node', { exact: true }).fill('0');
  await gpuErr.waitFor({ state: 'detached' });

  // Edit as › YAML with a bad key: the header counts it, and says "Ready to review" again once fixed
  await page.getByRole('button', { name: 'Edit as › YAML' }).click();
  const ta = page.getByLabel('Settings as YAML');
  const text = await ta.inputValue();
  await ta.fill(`bogus_key: 1\n${text}`);
  await page.getByRole('list', { name: 'Problems in the YAML' }).waitFor();
  const status = page.locator('.preview-status');
  await status.filter({ hasText: '1 problem in the YAML' }).waitFor();
  assert.doesNotMatch(await status.innerText(), /Ready to review/);
  await shot('yaml-problem-in-header');
  await ta.fill(text);
  await status.filter({ hasText: 'Ready to review' }).waitFor();
  await page.getByRole('button', { name: 'Edit as › YAML' }).click();

  // an emptied API model name says the recipe's name is used, not just "recipe"
  await page.getByLabel('API model name').fill('');
  const nameProv = page.locator('[data-field="api_model_name"] .prov');
  await nameProv.getByText('empty: the recipe\'s smoke-test is used').waitFor();
  assert.equal(await page.getByLabel('API model name').getAttribute('placeholder'), 'smoke-test');
  await shot('emptied-name');
  // wait for the preview of the new name itself: the status already said "Ready to review" for the
  // emptied name, and a Review drawn from that preview prefills the id from it (smoke-test-2)
  const named = page.waitForResponse((r) => r.url().includes('/api/v1/deployments/preview')
    && (r.request().postData() || '').includes('"fix-smoke"'));
  await page.getByLabel('API model name').fill('fix-smoke');
  await named;
  await nameProv.getByText('empty: the recipe\'s smoke-test is used').waitFor({ state: 'detached' });
  await status.filter({ hasText: 'Ready to review' }).waitFor();
  await page.getByRole('button', { name: 'Review' }).click();
  const review = page.getByRole('region', { name: 'Review' }).or(page.locator('section[aria-labelledby="rv-h"]'));
  await review.first().waitFor();
  const said = await review.first().innerText();
  assert.match(said, /1 replica\./);
  assert.doesNotMatch(said, /replica\(s\)/);
  assert.match(said, /walltime 30 min/);
  // the id is there when the box is ticked: the API model name, free among the recipes
  await page.getByLabel('Also save these settings as a recipe').check();
  assert.equal(await page.getByLabel('Recipe id').inputValue(), 'fix-smoke');
  await page.getByLabel('Recipe name').fill('Fix smoke');
  await shot('save-prefilled');
  await axe(page, 'Review with Also save');
  await page.getByRole('button', { name: 'Launch' }).click();
  await page.waitForURL((u) => /^\/deployments\/\d+$/.test(u.pathname));

  // the saved recipe: its description, renamed, then deleted
  await page.goto('/deployments/new');
  const saved = page.getByRole('tabpanel', { name: 'Saved' });
  const item = saved.getByRole('listitem').filter({ hasText: 'Fix smoke' });
  await item.waitFor();
  assert.match(await item.innerText(), /A tiny OpenAI-shaped engine/);
  assert.match(await item.innerText(), /smoke/);
  await shot('saved-listed');
  await saved.getByRole('button', { name: 'Rename Fix smoke' }).click();
  const rn = page.getByRole('dialog', { name: 'Rename Fix smoke' });
  await rn.getByLabel('Name').fill('Smoke, renamed');
  await axe(page, 'the Rename dialog');
  await rn.getByRole('button', { name: 'Rename' }).click();
  await page.getByText('Renamed fix-smoke to Smoke, renamed.').waitFor();
  await saved.getByRole('listitem').filter({ hasText: 'Smoke, renamed' }).waitFor();
  assert.equal((await stack.api('GET', '/api/v1/recipes/fix-smoke')).json.name, 'Smoke, renamed');
  await saved.getByRole('button', { name: 'Delete Smoke, renamed' }).click();
  const del = page.getByRole('dialog', { name: 'Delete the saved recipe Smoke, renamed?' });
  await del.getByRole('button', { name: 'Delete' }).click();
  await page.getByText('Deleted the saved recipe Smoke, renamed.').waitFor();
  // the list reloads without it, and the Saved tab stays open with its note (the last saved recipe gone,
  // the page once switched to Library here and hid the note)
  await saved.getByRole('listitem').filter({ hasText: 'Smoke, renamed' }).waitFor({ state: 'detached' });
  await saved.getByText('None yet.', { exact: false }).waitFor();
  assert.ok(await page.getByText('Deleted the saved recipe Smoke, renamed.').isVisible(), 'the note stays after the list reloads');
  assert.equal((await stack.api('GET', '/api/v1/recipes/fix-smoke')).status, 404);
  await shot('saved-deleted');
  assertClean(rec);
});

test('Cluster defaults offer the cluster\'s partitions, accounts and QoS as choices', { skip }, async () => {
  const { page, rec, shot } = await newPage(b, stack, 'defaults-choices');
  await signIn(page, stack);
  await page.goto('/deployments?slurm=1&tab=defaults');
  const part = page.getByLabel('Default partition');
  await part.waitFor();
  await page.getByText("The cluster's partitions are offered.").waitFor();
  const listed = async (id) => page.locator(`#${id}-list option`).evaluateAll((os) => os.map((o) => o.value));
  const parts = await listed('d-partition');
  for (const p of ['gpu', 'debug', 'inference']) assert.ok(parts.includes(p), `${p} in ${parts}`);
  assert.ok((await listed('d-account')).includes('research'));
  assert.ok((await listed('d-qos')).includes('normal'));
  assert.equal(await part.inputValue(), 'gpu');
  await shot('choices');
  await axe(page, 'Cluster defaults with choices');
  assertClean(rec);
});
