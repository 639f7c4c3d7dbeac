// PUT /api/v1/settings/slurm replaces the whole document: a Save on the Slurm sheet must keep every
// setting it was given, and the sheet shows and edits the JWT source (Static token / Key file /
// Command) and Cluster defaults' user_groups and EnforcePartLimits. A site renewing its JWT from a key
// file set through the API keeps renewal after a Save in the dashboard; the key-file source is real:
// Test connection mints a JWT from the harness's own key and slurmrestd takes it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import fs from 'node:fs';
import os from 'node:os';
import { startHarnessStack, stopHarnessStack, newPage, axe, signIn, assertClean, clusterEnv, saveHarnessSettings } from './support.mjs';

const env = clusterEnv();
let stack;
let b;
before(async () => { ({ stack, b } = await startHarnessStack({ provisioner: false })); });
after(async () => { await stopHarnessStack(stack, b); });

test('a Save on the Slurm sheet keeps the key-file JWT source set through the API; user_groups and EnforcePartLimits are edited there',
  { skip: !env && 'the harness cluster is not up (spec/cluster/up.sh)' }, async (t) => {
    // obleth reads its own copy of the site's key, owned by its service user (this test's) and mode 0600:
    // token_key_file refuses slurmctld's copy, which the slurm user owns
    const key = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'obleth-key-')), 'jwt_hs256.key');
    fs.copyFileSync(path.join(env.OBLETH_CLUSTER_DIR, 'etc', 'jwt_hs256.key'), key);
    fs.chmodSync(key, 0o600);
    t.after(() => fs.rmSync(path.dirname(key), { recursive: true, force: true }));
    // a script sets the JWT to renew from the site's key (the saved static token stays saved)
    const before = await saveHarnessSettings(stack);
    const put = await stack.api('PUT', '/api/v1/settings/slurm', { ...before, token_source: 'key_file', token_key_file: key,
      token_lifespan: 900, defaults: { ...before.defaults, enforce_part_limits: 'ALL' } });
    assert.equal(put.status, 200, put.text);

    const { page, rec, shot } = await newPage(b, stack, 'slurm-settings-keep');
    await signIn(page, stack);
    await page.goto('/deployments?slurm=1');
    const sheet = page.getByRole('dialog', { name: 'Slurm connection' });
    await sheet.waitFor();
    const sources = sheet.getByRole('group', { name: 'JWT source' });
    assert.equal(await sources.getByLabel('Key file').isChecked(), true);
    assert.equal(await sources.getByLabel('Static token').isChecked(), false);
    assert.equal(await sheet.getByLabel('Key file', { exact: true }).and(sheet.getByRole('textbox')).inputValue(), key);
    assert.equal(await sheet.getByLabel('Token lifespan (seconds)').inputValue(), '900');
    assert.equal(await sheet.getByLabel('JWT', { exact: true }).count(), 0, 'a static JWT field with a key-file source');
    await shot('key-file-source');
    await axe(page, 'the Slurm sheet with a key-file JWT source');

    // the key-file source is what Test connection uses: a JWT minted from the harness's key is taken
    await sheet.getByRole('button', { name: 'Test connection' }).click();
    const ok = sheet.getByRole('status').filter({ hasText: 'Connected.' });
    await ok.waitFor();
    assert.match(await ok.innerText(), /JWT\s+expires in 1\d min/i);

    // Command shows its own field; back to Key file keeps what was there
    await sources.getByLabel('Command').check();
    await sheet.getByLabel('Command', { exact: true }).and(sheet.getByRole('textbox')).waitFor();
    await shot('command-source');
    await axe(page, 'the Slurm sheet with a command JWT source');
    await sources.getByLabel('Key file').check();

    await sheet.getByRole('tab', { name: 'Cluster defaults' }).click();
    const groups = sheet.getByLabel("Slurm user's groups (user_groups, one per line)");
    await groups.fill('hpc\nobleth-staff\n');
    const epl = sheet.getByLabel('EnforcePartLimits');
    assert.equal(await epl.inputValue(), 'ALL');
    await epl.selectOption('ANY');
    await shot('cluster-defaults-groups');
    await axe(page, 'the Slurm sheet, Cluster defaults with user_groups');
    await sheet.getByRole('button', { name: 'Save' }).click();
    await sheet.waitFor({ state: 'detached' });
    await page.getByText('Slurm settings saved').waitFor();

    const saved = (await stack.api('GET', '/api/v1/settings/slurm')).json;
    assert.equal(saved.token_source, 'key_file', 'the Save dropped the key-file JWT source');
    assert.equal(saved.token_key_file, key);
    assert.equal(saved.token_lifespan, 900);
    assert.equal(saved.token_set, true, 'the saved static token went');
    assert.deepEqual(saved.defaults.user_groups, ['hpc', 'obleth-staff']);
    assert.equal(saved.defaults.enforce_part_limits, 'ANY');
    assert.deepEqual(saved.defaults.port_range, before.defaults.port_range);
    assert.equal(saved.defaults.log_dir, before.defaults.log_dir);

    // clearing the groups goes back to the host's group database (null), EnforcePartLimits to unknown
    await page.goto('/deployments?slurm=1&tab=defaults');
    await sheet.waitFor();
    await sheet.getByLabel("Slurm user's groups (user_groups, one per line)").fill('');
    await sheet.getByLabel('EnforcePartLimits').selectOption('');
    await sheet.getByRole('button', { name: 'Save' }).click();
    await sheet.waitFor({ state: 'detached' });
    const after = (await stack.api('GET', '/api/v1/settings/slurm')).json;
    assert.equal(after.defaults.user_groups, null);
    assert.equal(after.defaults.enforce_part_limits, null);
    assert.equal(after.token_source, 'key_file');

    const all = rec.bodies.map((r) => r.body).join('\n') + await page.content();
    assert.ok(!all.includes(env.OBLETH_SLURM_TOKEN), 'the JWT reached the page');
    assertClean(rec);
  });
