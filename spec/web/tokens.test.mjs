// Personal access tokens on the dashboard (/tokens, docs/access.md "Tokens for scripts"): a user makes
// one for a script, sees it once with a copy button, the script acts as them with it, and a revoke
// (asked first) stops it at once; the roles offered are the server's (session token_roles); the admin
// token makes none. obleth serve believes X-Remote-User from 127.0.0.1 (the browser stands in for the
// site's SSO proxy). Needs no Slurm: nothing is launched.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { newPage, axe, assertClean, startStack, browser, signIn, pressWithKeyboard } from './support.mjs';

let stack;
let b;
let dir;
before(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'obleth-tokens-'));
  writeFileSync(path.join(dir, 'access.lua'),
    'return { DEFAULTS = { group_roles = { ["ml-ops"] = "operator", ["hpc-admins"] = "admin" } } }\n');
  stack = await startStack({ provisioner: false, serveEnv: { OBLETH_AUTH_PROXY_HEADER: 'X-Remote-User',
    OBLETH_AUTH_PROXY_GROUPS_HEADER: 'X-Remote-Groups', OBLETH_AUTH_PROXY_FROM: '127.0.0.1', OBLETH_POLICY_DIR: dir } });
  b = await browser();
});
after(async () => {
  if (b) await b.close();
  if (stack) await stack.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const asToken = (token, p) => fetch(`${stack.base}${p}`, { headers: { Authorization: `Bearer ${token}` } });
const options = (page) => page.getByLabel('Role').locator('option').allInnerTexts();

test('an operator makes a token for a script, sees it once, and it acts as her until she revokes it', async () => {
  const { page, context, rec, shot } = await newPage(b, stack, 'tokens-operator');
  await context.grantPermissions(['clipboard-read', 'clipboard-write']);
  await context.setExtraHTTPHeaders({ 'X-Remote-User': 'alice', 'X-Remote-Groups': 'ml-ops' });
  await page.goto('/deployments');
  await page.getByText('alice · operator').waitFor();
  await page.getByRole('link', { name: 'Access tokens' }).click();
  await page.getByRole('heading', { level: 1, name: 'Personal access tokens' }).waitFor();
  await page.getByText('No personal access tokens.').waitFor();
  // her role and those below it; admin is not offered (the server's token_roles)
  assert.deepEqual(await options(page), ['viewer', 'operator']);
  assert.equal(await page.getByLabel('Role').inputValue(), 'operator');
  await shot('empty');
  await axe(page, 'Personal access tokens');

  await page.getByLabel('Name').fill('nightly benchmark');
  await page.getByRole('button', { name: 'Create token' }).click();
  const shown = page.getByLabel('New personal access token');
  await shown.waitFor();
  await page.getByText("Copy it now: you won't see it again.").waitFor();
  const token = await shown.inputValue();
  assert.match(token, /^obp_[0-9a-f]{48}$/);
  await page.getByRole('button', { name: 'Copy token' }).click();
  await page.getByText('Copied').waitFor();
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), token);
  await shot('created');
  await axe(page, 'a new token shown once');

  // the script acts as alice, with the token's role
  const who = await (await asToken(token, '/api/v1/session')).json();
  assert.deepEqual([who.user, who.role, who.via], ['alice', 'operator', 'pat']);

  // listed by name, prefix, role and when it was made; the token itself never again
  await page.getByRole('button', { name: 'Done' }).click();
  const row = page.getByRole('row', { name: /nightly benchmark/ });
  await row.waitFor();
  const text = await row.innerText();
  assert.match(text, new RegExp(`${token.slice(0, 12)}…`));
  assert.match(text, /operator/);
  assert.match(text, /\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC/);
  assert.ok(!(await page.content()).includes(token), 'the token is in the page after Done');
  await page.reload();
  await row.waitFor();
  assert.ok(!(await page.content()).includes(token), 'the token is in the page after a reload');

  // revoking asks first; Cancel keeps it working
  await pressWithKeyboard(page, 'Revoke token nightly benchmark');
  const ask = page.getByRole('dialog', { name: 'Revoke this token?' });
  await ask.waitFor();
  await ask.getByText('stops working at once').waitFor();
  await shot('revoke-asks');
  await axe(page, 'the revoke dialog');
  await ask.getByRole('button', { name: 'Cancel' }).click();
  await ask.waitFor({ state: 'detached' });
  assert.equal((await asToken(token, '/api/v1/models')).status, 200);
  await row.getByRole('button', { name: 'Revoke token nightly benchmark' }).click();
  await ask.getByRole('button', { name: 'Revoke token' }).click();
  await row.getByText('revoked').waitFor();
  assert.equal(await row.getByRole('button', { name: /Revoke/ }).count(), 0);
  assert.equal((await asToken(token, '/api/v1/models')).status, 401);
  await shot('revoked');
  assertClean(rec);
});

test('a viewer may give a token only the viewer role, and a lower role than one\'s own is kept', async () => {
  const { page, context, rec, shot } = await newPage(b, stack, 'tokens-viewer');
  await context.setExtraHTTPHeaders({ 'X-Remote-User': 'bob' });
  await page.goto('/tokens');
  await page.getByText('bob · viewer').waitFor();
  await page.getByRole('button', { name: 'Create token' }).waitFor();
  assert.deepEqual(await options(page), ['viewer']);
  // bob sees no User filter (listing another's tokens needs users.manage) and none of alice's tokens
  assert.equal(await page.getByLabel('User').count(), 0);
  await page.getByLabel('Name').fill('read-only dashboards');
  await page.getByRole('button', { name: 'Create token' }).click();
  const token = await page.getByLabel('New personal access token').inputValue();
  const who = await (await asToken(token, '/api/v1/session')).json();
  assert.deepEqual([who.user, who.role], ['bob', 'viewer']);
  await page.getByRole('row', { name: /read-only dashboards/ }).waitFor();
  assert.equal(await page.getByRole('row', { name: /nightly benchmark/ }).count(), 0);
  await shot('viewer');
  assertClean(rec);

  // alice (operator) picks viewer for a read-only script: the token has that role, not hers
  const a = await newPage(b, stack, 'tokens-lower-role');
  await a.context.setExtraHTTPHeaders({ 'X-Remote-User': 'alice', 'X-Remote-Groups': 'ml-ops' });
  await a.page.goto('/tokens');
  await a.page.getByLabel('Name').fill('read-only');
  await a.page.getByLabel('Role').selectOption('viewer');
  await a.page.getByRole('button', { name: 'Create token' }).click();
  const t2 = await a.page.getByLabel('New personal access token').inputValue();
  assert.equal((await (await asToken(t2, '/api/v1/session')).json()).role, 'viewer');
  await a.page.getByRole('row', { name: /read-only/ }).getByText('viewer').waitFor();
  assertClean(a.rec);
});

test('the admin token makes no token; an admin lists another user\'s and revokes one', async () => {
  const { page, rec, shot } = await newPage(b, stack, 'tokens-admin-token');
  await signIn(page, stack);
  await page.getByRole('link', { name: 'Access tokens' }).click();
  await page.getByText('which is no user').waitFor();
  assert.equal(await page.getByRole('button', { name: 'Create token' }).count(), 0);
  // the admin token sees every user's, with whose each is
  await page.getByRole('heading', { name: "Every user's tokens" }).waitFor();
  const bobs = page.getByRole('row', { name: /read-only dashboards/ });
  await bobs.getByRole('cell', { name: 'bob', exact: true }).waitFor();
  await shot('admin-token');
  await axe(page, 'Personal access tokens with the admin token');
  assertClean(rec);

  const c = await newPage(b, stack, 'tokens-admin');
  await c.context.setExtraHTTPHeaders({ 'X-Remote-User': 'carol', 'X-Remote-Groups': 'hpc-admins' });
  await c.page.goto('/tokens');
  await c.page.getByText('carol · admin').waitFor();
  assert.deepEqual(await options(c.page), ['viewer', 'operator', 'admin']);
  await c.page.getByRole('heading', { name: 'Your tokens' }).waitFor();
  await c.page.getByLabel('User').fill('bob');
  await c.page.getByRole('button', { name: 'Show' }).click();
  await c.page.waitForURL(/\/tokens\?user=bob$/);
  await c.page.getByRole('heading', { name: "bob's tokens" }).waitFor();
  const row = c.page.getByRole('row', { name: /read-only dashboards/ });
  await row.getByRole('button', { name: 'Revoke token read-only dashboards' }).click();
  const ask = c.page.getByRole('dialog', { name: 'Revoke this token?' });
  await ask.getByText('of bob').waitFor();
  await ask.getByRole('button', { name: 'Revoke token' }).click();
  await row.getByText('revoked').waitFor();
  const listed = await stack.api('GET', '/api/v1/tokens?user=bob');
  assert.ok(listed.json.tokens.every((t) => t.revoked_at != null));
  await c.shot('revoked-bobs');
  assertClean(c.rec);
});
