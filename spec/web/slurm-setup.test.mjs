// Empty database → sign in → "Set up Slurm" → the Slurm sheet: a wrong JWT says
// auth, the right one shows the API version, Slurm release and JWT expiry; Save;
// the card shows the provisioner's check-in.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startStack, browser, newPage, axe, assertClean, clusterEnv, portRange, ROOT, pressWithKeyboard, waitInPage,
  signIn } from './support.mjs';

const env = clusterEnv();
let stack;
let b;
// obleth serve's policy.d (docs/policy.md): empty until the last test breaks a file in it
const policyDir = mkdtempSync(path.join(os.tmpdir(), 'obleth-policy-'));

before(async () => {
  if (!env) return;
  stack = await startStack({ interval: '1', serveEnv: { OBLETH_POLICY_DIR: policyDir } });
  b = await browser();
});
after(async () => {
  if (b) await b.close();
  if (stack) await stack.stop();
  rmSync(policyDir, { recursive: true, force: true });
});

test('first contact: set up Slurm from the card, test the connection, save, see the provisioner check in',
  { skip: !env && 'the harness cluster is not up (spec/cluster/up.sh)' }, async () => {
    const { page, rec, shot } = await newPage(b, stack, 'slurm-setup');
    await page.goto('/deployments');
    await page.waitForURL('**/signin?next=%2Fdeployments');
    await shot('signin');
    await axe(page, 'sign-in');

    await page.getByLabel('Admin token').fill('not-the-token-at-all');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('alert').filter({ hasText: 'That is not the admin token.' }).waitFor();
    await shot('wrong-admin-token');

    await page.getByLabel('Admin token').fill(stack.token);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL('**/deployments');
    const card = page.getByRole('region', { name: 'Slurm' });
    const setUp = card.getByRole('link', { name: 'Set up Slurm' });
    await setUp.waitFor();
    await page.getByRole('table', { name: 'Models' }).or(page.getByText('No models yet')).first().waitFor();
    await shot('deployments-empty');
    await axe(page, 'Deployments (empty)');

    await setUp.click();
    await page.waitForURL('**/deployments?slurm=1');
    const sheet = page.getByRole('dialog', { name: 'Set up Slurm' });
    await sheet.waitFor();
    assert.equal(await sheet.getByRole('tab', { name: 'Connection' }).getAttribute('aria-selected'), 'true');
    await shot('sheet-open');
    await axe(page, 'the Slurm sheet');

    // the server checks the fields; its error shows at the field, and nothing is saved
    await sheet.getByLabel('slurmrestd URL').fill('ftp://slurm-head');
    await sheet.getByRole('button', { name: 'Save' }).click();
    await sheet.getByText('is not valid: an http:// or https:// URL').first().waitFor();
    assert.equal(await sheet.getByLabel('slurmrestd URL').getAttribute('aria-invalid'), 'true');
    assert.equal((await stack.api('GET', '/api/v1/settings/slurm')).json.url, null);
    await shot('field-error');
    await axe(page, 'the Slurm sheet with a field error');

    // nothing listening there: said in plain words (and the old error goes with the old value)
    await sheet.getByLabel('slurmrestd URL').fill('http://127.0.0.1:9');
    assert.equal(await sheet.getByText('is not valid: an http:// or https:// URL').count(), 0);
    assert.equal(await sheet.getByLabel('slurmrestd URL').getAttribute('aria-invalid'), null);
    await sheet.getByRole('button', { name: 'Test connection' }).click();
    await sheet.getByRole('status').filter({ hasText: 'could not be reached' }).waitFor();
    await shot('test-unreachable');

    await sheet.getByLabel('slurmrestd URL').fill(env.OBLETH_SLURM_URL);
    await sheet.getByLabel('Slurm user', { exact: true }).fill(env.OBLETH_SLURM_USER);
    await sheet.getByLabel('JWT', { exact: true }).fill(`${env.OBLETH_SLURM_TOKEN.slice(0, -6)}AAAAAA`);
    await sheet.getByRole('button', { name: 'Test connection' }).click();
    const result = sheet.getByRole('status').filter({ hasText: /Connected|The test failed/ });
    await result.waitFor();
    assert.match(await result.innerText(), /The test failed/);
    assert.match(await result.innerText(), /refused the credentials/);
    await shot('test-wrong-jwt');

    await sheet.getByLabel('JWT', { exact: true }).fill(env.OBLETH_SLURM_TOKEN);
    await pressWithKeyboard(page, 'Test connection'); // Tab stays inside the modal sheet
    await sheet.getByRole('status').filter({ hasText: 'Connected.' }).waitFor();
    const ok = await sheet.getByRole('status').filter({ hasText: 'Connected.' }).innerText();
    // the harness cluster's API version and release (spec/run.sh runs this against Slurm 26.05)
    const api = env.OBLETH_SLURM_API_VERSION.replace(/\./g, '\\.');
    const release = (env.OBLETH_CLUSTER_RELEASE || '22.05').replace(/\./g, '\\.');
    assert.match(ok, new RegExp(api));
    assert.match(ok, new RegExp(`${release}\\.\\d+`));
    assert.match(ok, /JWT\s+expires in \d+ h/i);
    assert.match(ok, /Latency\s+[\d.]+ ms/i);
    await shot('test-ok');

    assert.equal(await sheet.getByLabel('Slurm enabled').isChecked(), true, 'a first setup starts enabled');
    // tabs by keyboard: arrow right moves to Cluster defaults, arrow left back
    await sheet.getByRole('tab', { name: 'Connection' }).focus();
    await page.keyboard.press('ArrowRight');
    await sheet.getByRole('tab', { name: 'Cluster defaults', selected: true }).waitFor();
    await sheet.getByLabel('Default partition').waitFor();
    await page.keyboard.press('ArrowLeft');
    await sheet.getByRole('tab', { name: 'Connection', selected: true }).waitFor();
    await sheet.getByRole('tab', { name: 'Cluster defaults' }).click();
    await sheet.getByLabel('Default partition').fill('gpu');
    await sheet.getByLabel('Default account').fill('research');
    await sheet.getByLabel('Job log directory').fill(stack.logdir);
    const [lo, hi] = portRange();
    await sheet.getByLabel('From').fill(String(lo));
    await sheet.getByLabel('to', { exact: true }).fill(String(hi));
    await shot('cluster-defaults');
    await axe(page, 'the Slurm sheet, Cluster defaults');
    await pressWithKeyboard(page, 'Save');
    await sheet.waitFor({ state: 'detached' });
    await page.waitForURL((u) => u.pathname === '/deployments' && !u.search);
    await page.getByText('Slurm settings saved').waitFor();

    // the provisioner's next passes check in; the card shows it (two pass intervals = 2 s, plus the event)
    const conn = card.getByRole('link', { name: 'Slurm connection' });
    await conn.waitFor();
    await card.getByText(/Provisioner checked in/).waitFor({ timeout: 5000 });
    await card.getByText(new RegExp(`${api} \\(Slurm ${release}\\.\\d+\\)`)).waitFor();
    await shot('card-set-up');
    await axe(page, 'Deployments with Slurm set up');

    const saved = (await stack.api('GET', '/api/v1/settings/slurm')).json;
    assert.equal(saved.enabled, true);
    assert.equal(saved.url, env.OBLETH_SLURM_URL);
    assert.equal(saved.token_set, true);
    assert.deepEqual(saved.defaults.port_range, [lo, hi]);
    // saving launches nothing
    assert.deepEqual((await stack.api('GET', '/api/v1/replicas')).json.replicas, []);

    // reopening: the JWT is never in the page, its field is empty and says "leave unchanged"
    await conn.click();
    const sheet2 = page.getByRole('dialog', { name: 'Slurm connection' });
    await sheet2.waitFor();
    assert.equal(await sheet2.getByLabel('JWT', { exact: true }).inputValue(), '');
    await sheet2.getByText('A JWT is saved; it is never shown').waitFor();
    await shot('sheet-reopened');

    // a JWT an hour from expiry, typed over the saved one: the card warns
    const short = execFileSync(path.join(ROOT, 'spec', 'cluster', 'token.sh'), ['3600', env.OBLETH_SLURM_USER]).toString().trim();
    await sheet2.getByLabel('JWT', { exact: true }).fill(short);
    await sheet2.getByRole('button', { name: 'Save' }).click();
    await sheet2.waitFor({ state: 'detached' });
    await card.getByText(/expires in (59 min|1 h) — renew it soon/).waitFor();
    await shot('jwt-near-expiry');
    const all1 = rec.bodies.map((r) => r.body).join('\n') + await page.content();
    assert.ok(!all1.includes(short), 'the new JWT reached the page');

    // New deployment opens on its first step (its flow: new-deployment*.test.mjs)
    await page.getByRole('link', { name: 'New deployment' }).click();
    await page.waitForURL('**/deployments/new');
    await page.getByRole('tab', { name: 'Library', selected: true }).waitFor();
    // focus moves to the new page's <main> (after Preact's effects run, so wait for it)
    await waitInPage(page, () => document.activeElement && document.activeElement.id === 'main', 'focus on <main>');
    await shot('new-deployment');
    await axe(page, 'New deployment');

    // a deployment page for a model that does not exist says so
    await page.goto('/deployments/9999');
    await page.getByRole('heading', { level: 1, name: 'Model not found' }).waitFor();
    await shot('model-not-found');
    await axe(page, 'a deployment page for no model');

    const all = rec.bodies.map((r) => r.body).join('\n') + await page.content();
    assert.ok(!all.includes(env.OBLETH_SLURM_TOKEN), 'the JWT reached the page');
    assert.ok(!all.includes(stack.token), 'the admin token reached the page');
    assertClean(rec);
  });

test('a policy file obleth serve cannot load shows on the Slurm card, with its file and line',
  { skip: !env && 'the harness cluster is not up (spec/cluster/up.sh)' }, async () => {
    const { page, rec, shot } = await newPage(b, stack, 'slurm-policy-error');
    await signIn(page, stack);
    const file = path.join(policyDir, 'suggestions.lua');
    writeFileSync(file, 'return {\n  suggest = function(outcomes\n}\n');
    try {
      await page.goto('/deployments');
      const card = page.getByRole('region', { name: 'Slurm' });
      const shown = card.getByRole('status').filter({ hasText: 'Policy file not loaded by obleth serve' });
      await shown.waitFor();
      assert.match(await shown.innerText(), new RegExp(`${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}:\\d+`));
      // the file is named once, beside the message, not again at the message's start
      assert.equal((await shown.innerText()).split(file).length - 1, 1, await shown.innerText());
      await shot('serve-policy-error');
      await axe(page, 'the Slurm card with a policy error');
    } finally {
      rmSync(file, { force: true });
    }
    // removed, the built-in is back and the card says nothing more
    await page.goto('/deployments');
    await page.getByRole('region', { name: 'Slurm' }).getByText(/Provisioner checked in/).waitFor();
    assert.equal(await page.getByText('Policy file not loaded by obleth serve').count(), 0);
    assertClean(rec);
  });
