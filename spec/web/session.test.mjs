// Client keys (create shown once + copy, revoke, keyless); strings from the
// cluster and from users rendered as text (no dialog, no CSP violation); no
// secret in any response the page received or in its DOM; signed out, the
// page's calls get 401 and it returns to /signin; writes need the page's header.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { newPage, axe, signIn, assertClean, clusterEnv, pressWithKeyboard, waitInPage, startHarnessStack,
  stopHarnessStack } from './support.mjs';

const env = clusterEnv();
const skip = !env && 'the harness cluster is not up (spec/cluster/up.sh)';
const XSS = '<img src=x onerror=alert(1)>';
let stack;
let b;
// no provisioner: what the page shows is exactly what this test seeds through the API
before(async () => ({ stack, b } = await startHarnessStack({ provisioner: false }, { hf_token: 'hf_secretsecretsecret123' })));
after(() => stopHarnessStack(stack, b));

test('client keys: a new key is shown once with a copy button, revoked keys stop, keyless toggles', { skip }, async () => {
  const { page, context, rec, shot } = await newPage(b, stack, 'keys');
  await context.grantPermissions(['clipboard-read', 'clipboard-write']);
  await signIn(page, stack);
  await page.getByRole('link', { name: 'Client keys' }).click();
  await page.getByRole('heading', { level: 1, name: 'Client keys' }).waitFor();
  await page.getByText('No client keys yet.').waitFor();
  await shot('empty');
  await axe(page, 'Client keys');

  await page.getByLabel('Name').fill('chat frontend');
  await page.getByLabel('Requests a minute').fill('5');
  await page.keyboard.press('Enter');
  const shown = page.getByLabel('New client key');
  await shown.waitFor();
  const key = await shown.inputValue();
  assert.match(key, /^obk_[0-9a-f]{48}$/);
  await page.getByRole('button', { name: 'Copy key' }).click();
  await page.getByText('Copied').waitFor();
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), key);
  await shot('created');
  await axe(page, 'Client keys with a new key shown');

  // the key works on the router (401 is not what a valid key gets), and it is shown only once
  const withKey = await fetch(`${stack.base}/v1/models`, { headers: { Authorization: `Bearer ${key}` } });
  assert.equal(withKey.status, 200);
  await page.reload();
  const row = page.getByRole('row', { name: /chat frontend/ });
  await row.waitFor();
  assert.match(await row.innerText(), new RegExp(key.slice(0, 12)));
  // its limit, its owner (who made it: token:admin, the admin token) and the request it made
  await row.getByText('5 a minute').waitFor();
  await row.getByText('1 request').waitFor();
  await row.getByText('token:admin').waitFor();
  await shot('limits-and-usage');
  assert.ok(!(await page.content()).includes(key), 'the key is in the page after a reload');

  await pressWithKeyboard(page, 'Revoke key chat frontend');
  const ask = page.getByRole('dialog', { name: 'Revoke this key?' });
  await ask.waitFor();
  await shot('revoke-asks');
  await ask.getByRole('button', { name: 'Revoke' }).click();
  await row.getByText('revoked').waitFor();
  const revoked = await fetch(`${stack.base}/v1/models`, { headers: { Authorization: `Bearer ${key}` } });
  assert.equal(revoked.status, 401);
  await shot('revoked');

  const keyless = page.getByLabel('Accept /v1/ requests without a client key');
  assert.equal(await keyless.isChecked(), false);
  await keyless.focus();
  await page.keyboard.press('Space');
  await waitInPage(page, () => document.querySelector('input[type=checkbox]').checked, 'keyless checked');
  assert.equal((await stack.api('GET', '/api/v1/settings/router')).json.keyless, true);
  await shot('keyless-on');
  await keyless.uncheck();
  await waitInPage(page, () => !document.querySelector('input[type=checkbox]').checked, 'keyless unchecked');
  assert.equal((await stack.api('GET', '/api/v1/settings/router')).json.keyless, false);
  assertClean(rec);
});

test('strings from the cluster and from users show as text, and no secret reaches the page', { skip }, async () => {
  // a saved recipe named with markup (the smoke-test recipe's document under another id and name)
  const smoke = (await stack.api('GET', '/api/v1/recipes/smoke-test')).json.recipe;
  const recipe = await stack.api('POST', '/api/v1/recipes', { ...smoke, id: 'escape-recipe', name: XSS });
  assert.equal(recipe.status, 201, recipe.text);
  const l = await stack.api('POST', '/api/v1/deployments/launch', { recipe_id: 'escape-recipe', api_model_name: 'escape-web',
    values: { replicas: 1 } });
  assert.equal(l.status, 201, l.text);
  const id = l.json.model.id;
  assert.equal((await stack.api('PATCH', `/api/v1/models/${id}`, { description: XSS })).status, 200);
  // what a provisioner would report: a queued job with Slurm's reason, then its end, and a refused submit
  const now = Date.now() / 1000;
  const nonce = '0123456789abcdef';
  let rep = await stack.api('POST', '/api/v1/provisioner/report', {
    pass: { started_at: now, duration: 0.1, error: null },
    replicas: [{ nonce, model_id: id, slot: 1, state: 'submitted', job_id: 4242, pending_reason: XSS, launch_id: l.json.launch.id }] });
  assert.equal(rep.status, 200, rep.text);
  rep = await stack.api('POST', '/api/v1/provisioner/report', {
    pass: { started_at: now, duration: 0.1, error: XSS },
    provision_errors: { [id]: { message: XSS, field: 'partition', code: 'refused', slurm_code: 2000 } },
    outcomes: [{ nonce, model_id: id, job_id: 4242, state: 'FAILED', reason: XSS, exit_code: 1,
      node: 'n1', started_at: now - 60, ended_at: now }] });
  assert.equal(rep.status, 200, rep.text);
  assert.equal((await stack.api('POST', '/api/v1/keys', { name: XSS })).status, 201);

  const { page, rec, shot } = await newPage(b, stack, 'escaping');
  await signIn(page, stack);
  await page.getByRole('row', { name: /escape-web/ }).getByText(XSS).first().waitFor();
  await page.getByRole('region', { name: 'Slurm' }).getByText(XSS).waitFor(); // the pass error
  await shot('deployments');
  await page.getByRole('link', { name: 'escape-web' }).click();
  await page.getByRole('alert').filter({ hasText: 'Slurm refused the last job' }).getByText(XSS).waitFor();
  await page.getByRole('region', { name: 'Status' }).getByText(XSS).first().waitFor(); // the description
  await page.getByRole('region', { name: 'Settings' }).getByText(XSS).waitFor(); // the recipe's name
  await page.getByRole('table', { name: 'Launch history' }).getByText(XSS).waitFor(); // the job's end reason
  await shot('deployment');
  await page.getByRole('table', { name: 'Replicas' }).getByText(XSS).first().waitFor(); // Slurm's pending reason
  await shot('deployment');
  await page.goto('/keys');
  await page.getByRole('row', { name: /img src=x/ }).waitFor();
  await shot('keys');
  await page.goto('/deployments?slurm=1&tab=defaults');
  const sheet = page.getByRole('dialog', { name: 'Slurm connection' });
  await sheet.getByRole('tab', { name: 'Cluster defaults', selected: true }).waitFor();
  await sheet.getByText('A Hugging Face token is saved').waitFor();
  await shot('sheet-defaults');
  await axe(page, 'the Slurm sheet on Cluster defaults');
  // clearing a secret is explicit; the JWT, left empty, is kept
  await sheet.getByLabel('Clear the saved Hugging Face token').check();
  await sheet.getByText('The saved Hugging Face token will be cleared.').waitFor();
  await sheet.getByRole('button', { name: 'Save' }).click();
  await sheet.waitFor({ state: 'detached' });
  const saved = (await stack.api('GET', '/api/v1/settings/slurm')).json;
  assert.equal(saved.defaults.hf_token_set, false);
  assert.equal(saved.token_set, true);

  assert.equal(await page.locator('img').count(), 0, 'an <img> was made from a string');
  const dom = await page.content();
  const bodies = rec.bodies.map((r) => r.body).join('\n');
  for (const [what, secret] of [['the JWT', env.OBLETH_SLURM_TOKEN], ['the admin token', stack.token],
    ['the Hugging Face token', 'hf_secretsecretsecret123']]) {
    assert.ok(!bodies.includes(secret), `${what} in a response the page received`);
    assert.ok(!dom.includes(secret), `${what} in the DOM`);
  }
  assert.ok(rec.bodies.length > 10, 'responses were collected');
  assertClean(rec);
});

test('signed out, the page\'s calls get 401 and it returns to /signin; writes need the page\'s header', { skip }, async () => {
  const { page, context, rec, shot } = await newPage(b, stack, 'signout');
  await signIn(page, stack);
  await page.goto('/keys');
  await page.getByRole('heading', { level: 1, name: 'Client keys' }).waitFor();
  const cookies = await context.cookies();
  const session = cookies.find((c) => c.httpOnly);
  assert.ok(session, 'an HttpOnly session cookie');
  assert.equal(session.sameSite, 'Strict');
  assert.equal(await page.evaluate(() => document.cookie), '', 'the session cookie is readable by script');
  assert.equal(await page.evaluate(() => localStorage.length + sessionStorage.length), 0);
  const cookie = `${session.name}=${session.value}`;

  // a write from elsewhere (the cookie, no X-Requested-With, another Origin) is refused; the page's own is not
  const forged = await fetch(`${stack.base}/api/v1/keys`, { method: 'POST', headers: { Cookie: cookie,
    Origin: 'http://evil.example', 'Content-Type': 'application/json' }, body: JSON.stringify({ name: 'forged' }) });
  assert.equal(forged.status, 403);
  assert.equal((await stack.api('GET', '/api/v1/keys')).json.keys.filter((k) => k.name === 'forged').length, 0);

  // the session ends elsewhere (another tab signs out): the page's next call (its event stream
  // reconnecting, or a refetch after an event) gets 401 → /signin
  const out = await fetch(`${stack.base}/api/v1/session`, { method: 'DELETE', headers: { Cookie: cookie, 'X-Requested-With': 'obleth' } });
  assert.equal(out.status, 204);
  await stack.api('POST', '/api/v1/keys', { name: 'made by a script' }); // an event: the page refetches
  await page.waitForURL('**/signin?next=%2Fkeys');
  await page.getByRole('heading', { name: 'Sign in to obleth' }).waitFor();
  await shot('back-at-signin');
  const sessionGone = await fetch(`${stack.base}/api/v1/keys`, { headers: { Cookie: cookie } });
  assert.equal(sessionGone.status, 401);

  // signing in again returns to where the page was; Sign out (keyboard) ends the session
  await page.getByLabel('Admin token').fill(stack.token);
  await page.keyboard.press('Enter');
  await page.waitForURL('**/keys');
  await pressWithKeyboard(page, 'Sign out');
  await page.waitForURL('**/signin');
  await page.goto('/deployments');
  await page.waitForURL('**/signin?next=%2Fdeployments');
  await shot('signed-out');
  assertClean(rec);
});
