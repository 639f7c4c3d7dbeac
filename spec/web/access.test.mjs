// Roles on the dashboard (docs/access.md): obleth serve believes X-Remote-User from 127.0.0.1 (the
// browser stands in for a proxy that names the user); the page hides what the role cannot do, and the
// server refuses it anyway. Needs no Slurm: nothing is launched.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { newPage, axe, assertClean, startStack, browser } from './support.mjs';

let stack;
let b;
let dir;
before(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'obleth-access-'));
  writeFileSync(path.join(dir, 'access.lua'), 'return { DEFAULTS = { group_roles = { ["ml-ops"] = "operator" } } }\n');
  stack = await startStack({ provisioner: false, serveEnv: { OBLETH_AUTH_PROXY_HEADER: 'X-Remote-User',
    OBLETH_AUTH_PROXY_GROUPS_HEADER: 'X-Remote-Groups', OBLETH_AUTH_PROXY_FROM: '127.0.0.1', OBLETH_POLICY_DIR: dir } });
  b = await browser();
  await stack.api('POST', '/api/v1/models', { name: 'shared-model' });
});
after(async () => {
  if (b) await b.close();
  if (stack) await stack.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test('a viewer sees the deployments but no New deployment, no Client keys and no deployment actions', async () => {
  const { page, context, rec, shot } = await newPage(b, stack, 'access-viewer');
  await context.setExtraHTTPHeaders({ 'X-Remote-User': 'bob' });
  await page.goto('/deployments');
  await page.getByRole('heading', { level: 1, name: 'Deployments' }).waitFor();
  await page.getByText('bob · viewer').waitFor();
  await page.getByRole('link', { name: 'shared-model' }).waitFor();
  assert.equal(await page.getByRole('link', { name: 'New deployment' }).count(), 0);
  assert.equal(await page.getByRole('link', { name: 'Client keys' }).count(), 0);
  await shot('deployments');
  await axe(page, 'Deployments as a viewer');
  await page.getByRole('link', { name: 'shared-model' }).click();
  await page.getByRole('heading', { level: 1, name: 'shared-model' }).waitFor();
  assert.equal(await page.getByRole('button', { name: 'Delete model' }).count(), 0);
  await shot('deployment');
  assertClean(rec);
});

test('an operator sees New deployment and the deployment actions, but not Client keys', async () => {
  const { page, context, rec, shot } = await newPage(b, stack, 'access-operator');
  await context.setExtraHTTPHeaders({ 'X-Remote-User': 'alice', 'X-Remote-Groups': 'ml-ops' });
  await page.goto('/deployments');
  await page.getByText('alice · operator').waitFor();
  await page.getByRole('link', { name: 'New deployment' }).waitFor();
  assert.equal(await page.getByRole('link', { name: 'Client keys' }).count(), 0);
  await page.getByRole('link', { name: 'shared-model' }).click();
  await page.getByRole('button', { name: 'Delete model' }).waitFor();
  await shot('deployment');
  assertClean(rec);
});
