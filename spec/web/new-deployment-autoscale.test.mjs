// New deployment with autoscale (docs/autoscaling.md): the form's Autoscaling settings with their provenance and the
// managed schema's hints, the YAML view carrying them, Review and Launch with autoscale min 0 (no fixed
// count), and the deployment page saying the model is scaled to zero.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { newPage, axe, signIn, assertClean, clusterEnv, startHarnessStack, stopHarnessStack } from './support.mjs';

const env = clusterEnv();
let stack;
let b;
before(async () => ({ stack, b } = await startHarnessStack({ interval: '1' })));
after(() => stopHarnessStack(stack, b));

const skip = !env && 'the harness cluster is not up (spec/cluster/up.sh)';

test('smoke-test launched from the form with autoscale min 0 shows "scaled to zero" on its page', { skip }, async () => {
  const { page, rec, shot } = await newPage(b, stack, 'new-deployment-autoscale');
  await signIn(page, stack);
  await page.goto('/deployments/new');
  const library = page.getByRole('tabpanel', { name: 'Library' });
  const libTab = page.getByRole('tab', { name: 'Library' });
  if (await libTab.getAttribute('aria-selected') !== 'true') await libTab.click();
  await library.getByRole('button', { name: 'Use Smoke test' }).click();
  await page.getByRole('group', { name: 'Partition' }).getByRole('radio', { name: /^gpu/ }).waitFor();

  // the Autoscaling settings: empty (not set) until one is given, bounds and empty values from the schema
  const group = page.getByRole('group', { name: 'Autoscaling' });
  await group.waitFor();
  assert.match(await page.locator('[data-field="autoscale.min_replicas"]').innerText(), /not set/);
  assert.match(await page.locator('[data-field="autoscale.scale_down_after"] .help').innerText(), /Empty: 300 s\. \(0–3600\)/);
  assert.match(await page.locator('[data-field="autoscale.idle_to_zero_after"] .help').innerText(), /Empty: 1800 s\. \(0–604800\)/);
  await page.getByLabel('Autoscale: at least (replicas)', { exact: true }).fill('0');
  await page.getByLabel('Autoscale: at most (replicas)', { exact: true }).fill('2');
  await page.locator('[data-field="autoscale.max_replicas"] .prov', { hasText: 'changed by you' }).waitFor();
  assert.match(await page.locator('[data-field="autoscale.min_replicas"]').innerText(), /changed by you/);
  // no fixed count with autoscale
  await page.locator('[data-field="replicas"] .prov', { hasText: 'not set' }).waitFor();
  await page.getByLabel('API model name').fill('auto-form');
  await page.locator('.preview-status', { hasText: 'Ready to review' }).waitFor();
  await shot('form');
  await axe(page, 'the form with autoscale');

  // the YAML view carries autoscale, and a change there comes back to the form as the user's
  await page.getByRole('button', { name: 'Edit as › YAML' }).click();
  const ta = page.getByLabel('Settings as YAML');
  const text = await ta.inputValue();
  assert.match(text, /^autoscale:\n {2}min_replicas: 0\n {2}max_replicas: 2$/m);
  assert.doesNotMatch(text, /^replicas:/m);
  await ta.fill(text.replace(/^ {2}max_replicas: 2$/m, '  max_replicas: 2\n  idle_to_zero_after: 600'));
  await shot('yaml');
  await page.getByText(/^No problems · 4 settings changed by you/).waitFor();
  await page.getByRole('button', { name: 'Edit as › YAML' }).click();
  await page.locator('[data-field="autoscale.idle_to_zero_after"] .prov', { hasText: 'changed by you' }).waitFor();
  assert.equal(await page.getByLabel('Idle to zero after (seconds)', { exact: true }).inputValue(), '600');

  await page.locator('.preview-status', { hasText: 'Ready to review' }).waitFor();
  await page.getByRole('button', { name: 'Review' }).click();
  await page.getByLabel('Job script (read-only)').waitFor();
  await shot('review');
  await page.getByRole('button', { name: 'Launch' }).click();
  await page.waitForURL(/\/deployments\/\d+$/);
  const id = page.url().split('/').pop();
  await page.getByRole('heading', { level: 1, name: 'auto-form' }).waitFor();
  await page.getByText(/Replicas: 0 now, 0 wanted — scaled to zero/).waitFor({ timeout: 60000 });
  await page.getByText('follows the load: 0 to 2, 4 requests in flight each').waitFor();
  await shot('scaled-to-zero');
  const spec = (await stack.api('GET', `/api/v1/models/${id}/managed`)).json;
  assert.deepEqual(spec.autoscale, { min_replicas: 0, max_replicas: 2, target_inflight: 4, scale_down_after: 300,
    idle_to_zero_after: 600 });
  assert.equal(spec.replicas ?? null, null, 'no fixed count');
  assertClean(rec);
});
