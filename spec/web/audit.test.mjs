// The audit trail on the dashboard (/audit, docs/access.md "Audit"): an admin reads who changed what,
// newest first, and narrows it by the route's filters (user, model, since, limit); what someone sent
// (a user's name, a key's name) is shown as text. Who may read it is the server's access policy: here
// a policy.d file keeps audit.read for admins, and the page is hidden from the other roles (from the
// session's `can`), which the server refuses anyway. obleth serve believes X-Remote-User from
// 127.0.0.1 (the browser and this test stand in for the site's SSO proxy). Needs no Slurm.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { newPage, axe, assertClean, startStack, browser } from './support.mjs';

const XSS_USER = '<img src=x onerror=alert(1)>';
const XSS_NAME = '<script>alert(2)</script>';
let stack;
let b;
let dir;
const ids = {};

// a write as a user the proxy names
async function as(user, groups, method, p, body) {
  const res = await fetch(stack.base + p, { method, headers: { 'X-Remote-User': user, 'X-Remote-Groups': groups,
    'X-Requested-With': 'obleth', ...(body ? { 'Content-Type': 'application/json' } : {}) },
  body: body ? JSON.stringify(body) : undefined });
  const text = await res.text();
  assert.ok(res.ok, `${method} ${p} as ${user}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

before(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'obleth-audit-'));
  writeFileSync(path.join(dir, 'access.lua'), `
local actions = {}
for k, v in pairs(builtin.DEFAULTS.actions) do actions[k] = v end
actions["audit.read"] = "admin"
return { DEFAULTS = { group_roles = { ["ml-ops"] = "operator", ["hpc-admins"] = "admin" }, actions = actions } }
`);
  stack = await startStack({ provisioner: false, serveEnv: { OBLETH_AUTH_PROXY_HEADER: 'X-Remote-User',
    OBLETH_AUTH_PROXY_GROUPS_HEADER: 'X-Remote-Groups', OBLETH_AUTH_PROXY_FROM: '127.0.0.1', OBLETH_POLICY_DIR: dir } });
  b = await browser();
  // five writes, oldest first (beta is deleted, not the newest model: SQLite would give its id again)
  ids.alpha = (await as('alice', 'ml-ops', 'POST', '/api/v1/models', { name: 'alpha' })).id;
  ids.beta = (await as('alice', 'ml-ops', 'POST', '/api/v1/models', { name: 'beta' })).id;
  await as(XSS_USER, 'hpc-admins', 'POST', '/api/v1/keys', { name: XSS_NAME });
  ids.gamma = (await as('carol', 'hpc-admins', 'POST', '/api/v1/models', { name: 'gamma' })).id;
  await as('carol', 'hpc-admins', 'DELETE', `/api/v1/models/${ids.beta}`);
});
after(async () => {
  if (b) await b.close();
  if (stack) await stack.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const rows = (page) => page.locator('table.audit tbody tr');
async function rowCount(page, n, what) {
  for (let i = 0; i < 100; i++) {
    if (await rows(page).count() === n) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(await rows(page).count(), n, what);
}

test('an admin reads who changed what, newest first, with hostile strings as text', async () => {
  const { page, context, rec, shot } = await newPage(b, stack, 'audit-admin');
  await context.setExtraHTTPHeaders({ 'X-Remote-User': 'carol', 'X-Remote-Groups': 'hpc-admins' });
  await page.goto('/deployments');
  await page.getByText('carol · admin').waitFor();
  await page.getByRole('link', { name: 'Audit' }).click();
  await page.getByRole('heading', { level: 1, name: 'Audit' }).waitFor();
  await rowCount(page, 5, 'the five writes');
  const texts = await rows(page).allInnerTexts();
  // newest first: carol's delete of beta, her gamma, the key, then alice's two
  assert.match(texts[0], new RegExp(`carol[\\s\\S]*DELETE /api/v1/models/${ids.beta}`));
  assert.match(texts[1], /carol[\s\S]*POST \/api\/v1\/models[\s\S]*gamma/);
  assert.match(texts[2], /POST \/api\/v1\/keys/);
  assert.match(texts[4], /alice[\s\S]*single sign-on · operator[\s\S]*POST \/api\/v1\/models/);
  // the model by name while it exists, by id once deleted
  assert.equal(await rows(page).nth(4).getByRole('link', { name: 'alpha' }).getAttribute('href'), `/deployments/${ids.alpha}`);
  await rows(page).nth(0).getByText(`model ${ids.beta} (deleted)`).waitFor();
  await rows(page).nth(3).getByText(`model ${ids.beta} (deleted)`).waitFor();
  // what someone sent is text: the user's name and the key's name, never markup
  await page.getByText(XSS_USER, { exact: true }).waitFor();
  assert.equal(await page.locator('table.audit img, table.audit script').count(), 0);
  const keyRow = rows(page).nth(2);
  await keyRow.getByText('Change').click();
  assert.match(await keyRow.locator('pre').innerText(), new RegExp(`"name": "${XSS_NAME.replace(/[()]/g, '\\$&')}"`));
  await shot('trail');
  await axe(page, 'Audit');

  // a write made meanwhile shows on Refresh, at the top
  await as('alice', 'ml-ops', 'POST', '/api/v1/models', { name: 'delta' });
  await page.getByRole('button', { name: 'Refresh' }).click();
  await rowCount(page, 6, 'the new write after Refresh');
  assert.match(await rows(page).nth(0).innerText(), /alice[\s\S]*POST \/api\/v1\/models[\s\S]*delta/);
  assertClean(rec);
});

test('the trail narrows by user, model, time and count, and a refused filter says which', async () => {
  const { page, context, rec, shot } = await newPage(b, stack, 'audit-filters');
  await context.setExtraHTTPHeaders({ 'X-Remote-User': 'carol', 'X-Remote-Groups': 'hpc-admins' });
  await page.goto('/audit');
  await rowCount(page, 6, 'every write');
  const form = page.getByRole('form', { name: 'Filter the audit trail' });

  await form.getByLabel('User').fill('alice');
  await form.getByRole('button', { name: 'Apply' }).click();
  await page.waitForURL((u) => u.pathname === '/audit' && u.search === '?user=alice');
  await rowCount(page, 3, "alice's writes");
  for (const t of await rows(page).allInnerTexts()) assert.match(t, /^[\s\S]*alice/);
  await shot('by-user');

  await form.getByRole('button', { name: 'Clear' }).click();
  await rowCount(page, 6, 'every write again');
  assert.equal(await form.getByLabel('User').inputValue(), '');
  await form.getByLabel('Model').fill('alpha');
  await form.getByRole('button', { name: 'Apply' }).click();
  await rowCount(page, 1, "alpha's write");
  await rows(page).nth(0).getByRole('link', { name: 'alpha' }).waitFor();
  await form.getByLabel('Model').fill(String(ids.beta));
  await form.getByRole('button', { name: 'Apply' }).click();
  await rowCount(page, 2, "the deleted beta's two writes, by id");

  // since (typed in UTC): a second after the newest write, nothing; at it, what the API says
  await form.getByRole('button', { name: 'Clear' }).click();
  await rowCount(page, 6, 'every write again');
  const newest = (await stack.api('GET', '/api/v1/audit?limit=1')).json.entries[0].at;
  const atNewest = (await stack.api('GET', `/api/v1/audit?since=${newest}`)).json.entries.length;
  const utc = (s) => new Date(s * 1000).toISOString().slice(0, 19);
  await form.getByLabel('Since (UTC)').fill(utc(newest + 1));
  await form.getByRole('button', { name: 'Apply' }).click();
  await page.waitForURL((u) => u.searchParams.get('since') === String(newest + 1));
  await page.getByText('No entries match these filters.').waitFor();
  await form.getByLabel('Since (UTC)').fill(utc(newest));
  await form.getByRole('button', { name: 'Apply' }).click();
  await rowCount(page, atNewest, 'the writes at or after the newest one\'s second');
  await shot('since');

  // how many: the newest two, and a note that there may be more
  await form.getByRole('button', { name: 'Clear' }).click();
  await rowCount(page, 6, 'every write again');
  await form.getByLabel('Show').fill('2');
  await form.getByRole('button', { name: 'Apply' }).click();
  await rowCount(page, 2, 'the newest two');
  await page.getByText('Showing the newest 2').waitFor();
  await shot('limit');
  await form.getByLabel('Show').fill('5000');
  await form.getByRole('button', { name: 'Apply' }).click();
  await page.getByRole('alert').filter({ hasText: 'limit' }).waitFor();
  assert.equal(await rows(page).count(), 0, 'the entries of the filters before stay shown under the error');
  await shot('refused-limit');
  await axe(page, 'Audit with a refused filter');
  assertClean(rec);
});

test('roles the policy does not let read the trail see no Audit, and the server refuses them', async () => {
  for (const [user, groups, role] of [['alice', 'ml-ops', 'operator'], ['bob', '', 'viewer']]) {
    const { page, context, rec, shot } = await newPage(b, stack, `audit-${role}`);
    await context.setExtraHTTPHeaders({ 'X-Remote-User': user, 'X-Remote-Groups': groups });
    await page.goto('/deployments');
    await page.getByText(`${user} · ${role}`).waitFor();
    await page.getByRole('link', { name: 'Access tokens' }).waitFor();
    assert.equal(await page.getByRole('link', { name: 'Audit' }).count(), 0, `${role} sees Audit`);
    // typed by hand, the page says what the server said: the action and the role it needs
    await page.goto('/audit');
    const refused = page.getByRole('alert');
    await refused.waitFor();
    assert.match(await refused.innerText(), /audit\.read/);
    assert.match(await refused.innerText(), /admin/);
    assert.equal(await rows(page).count(), 0);
    assert.equal(await page.getByRole('form', { name: 'Filter the audit trail' }).count(), 0);
    await shot('refused');
    assertClean(rec);
  }
});
