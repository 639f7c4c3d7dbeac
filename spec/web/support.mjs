// Support for the dashboard's browser tests: the real `obleth serve` (temporary
// database, fresh admin token), the real `obleth-provisioner`, the harness Slurm
// cluster (build/cluster/env, started by spec/cluster/up.sh), and Debian's
// Chromium driven by playwright-core. Every page gets axe-core (0 serious /
// critical), every step a screenshot under build/web-screens/.
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { mkdirSync, readFileSync, rmSync, mkdtempSync, chmodSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import assert from 'node:assert/strict';

const require = createRequire(path.join(fileURLToPath(import.meta.url), '..', '..', '..', 'web', 'package.json'));
const { chromium } = require('playwright-core');
const axeSource = require('axe-core').source;

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const SCREENS = path.join(ROOT, 'build', 'web-screens');
const OBLETH = process.env.OBLETH_BIN || path.join(ROOT, 'build', 'obleth');

/** The stand-in Hugging Face Hub (spec/web/fake_hub_server.lua): {url, stop()}. */
export async function startHub() {
  const hub = start(['lua', 'spec/web/fake_hub_server.lua'], {}, /hub listening on (http:\/\/127\.0\.0\.1:\d+)/);
  return { url: (await hub.ready)[1], stop: hub.stop };
}

/**
 * The harness cluster's connection, or null when it is not up: the env file of the cluster whose
 * env the caller exported (OBLETH_CLUSTER_DIR: spec/run.sh runs these tests against Slurm 26.05),
 * else build/cluster/env (22.05).
 */
export function clusterEnv() {
  let text;
  const dir = process.env.OBLETH_CLUSTER_DIR || path.join(ROOT, 'build', 'cluster');
  try { text = readFileSync(path.join(dir, 'env'), 'utf8'); } catch { return null; }
  const env = {};
  for (const m of text.matchAll(/^export (\w+)=(.*)$/gm)) env[m[1]] = m[2].replace(/^'(.*)'$/, '$1');
  return env.OBLETH_SLURM_URL ? env : null;
}

const children = new Set();
process.on('exit', () => { for (const c of children) { try { c.kill('SIGKILL'); } catch { /* gone */ } } });

function start(args, env, readyRe) {
  const child = spawn(OBLETH, args, { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(child);
  let out = '';
  let err = '';
  child.stderr.on('data', (d) => { err += d; });
  const ready = new Promise((resolve, reject) => {
    child.stdout.on('data', (d) => {
      out += d;
      const m = readyRe && readyRe.exec(out);
      if (m) resolve(m);
    });
    child.on('exit', (code) => reject(new Error(`${args[0]} exited (${code}): ${out} ${err.slice(-2000)}`)));
    if (!readyRe) resolve(null);
  });
  const stop = () => new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) { children.delete(child); resolve(); return; }
    child.once('exit', () => { children.delete(child); resolve(); });
    child.kill('SIGTERM');
    setTimeout(() => { try { child.kill('SIGKILL'); } catch { /* gone */ } }, 8000).unref();
  });
  return { child, ready, stop, log: () => err };
}

/**
 * Start obleth serve (+ the provisioner unless provisioner: false) on a fresh database; serveEnv: more
 * environment for serve (e.g. HF_ENDPOINT).
 * Returns {base, token, api(method, path, body?), provisioner, stop()}.
 */
/** A TCP port on 127.0.0.1 that was free a moment ago (the kernel's choice for port 0), for a server a
 * test starts itself (slapd): never a fixed number another run may hold. */
export async function freePort() {
  const net = await import('node:net');
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => { const { port } = srv.address(); srv.close(() => resolve(port)); });
  });
}

export async function startStack({ provisioner = true, interval = '1', serveEnv = {} } = {}) {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'obleth-web-'));
  const logdir = path.join(dir, 'logs');
  mkdirSync(logdir);
  chmodSync(dir, 0o755);
  chmodSync(logdir, 0o1777);
  const token = randomBytes(24).toString('hex');
  const serve = start(['serve', '--listen', '127.0.0.1:0', '--db', path.join(dir, 'obleth.db')],
    { OBLETH_ADMIN_TOKEN: token, ...serveEnv }, /listening on (http:\/\/127\.0\.0\.1:\d+)/);
  const base = (await serve.ready)[1];
  let prov = null;
  const api = async (method, p, body, headers = {}) => {
    const res = await fetch(base + p, { method, headers: { Authorization: `Bearer ${token}`,
      ...(body !== undefined ? { 'Content-Type': 'application/json' } : {}), ...headers },
    body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    let json = null;
    try { json = JSON.parse(text); } catch { /* not JSON */ }
    return { status: res.status, json, text, headers: res.headers };
  };
  const stack = {
    base, token, api, logdir, serveLog: serve.log,
    startProvisioner() {
      prov = start(['provisioner'], { OBLETH_ADMIN_BASE_URL: base, OBLETH_ADMIN_TOKEN: token,
        OBLETH_PASS_INTERVAL: interval, OBLETH_DRAIN_SECONDS: '2' }, null);
      stack.provisionerLog = prov.log;
    },
    async stop() {
      await cancelJobs(stack).catch(() => {});
      if (prov) await prov.stop();
      await serve.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  if (provisioner) stack.startProvisioner();
  return stack;
}

/** Cancel every live job this installation submitted (the stack's own, by the tag in the job name). */
export async function cancelJobs(stack) {
  const env = clusterEnv();
  if (!env) return;
  const snap = await stack.api('GET', '/api/v1/provisioner/snapshot');
  const instance = snap.json && snap.json.instance;
  if (!instance) return;
  const v = env.OBLETH_SLURM_API_VERSION || 'v0.0.38';
  const h = { 'X-SLURM-USER-NAME': env.OBLETH_SLURM_USER, 'X-SLURM-USER-TOKEN': env.OBLETH_SLURM_TOKEN };
  const r = await fetch(`${env.OBLETH_SLURM_URL}/slurm/${v}/jobs`, { headers: h });
  const jobs = (await r.json()).jobs || [];
  for (const j of jobs) {
    const st = Array.isArray(j.job_state) ? j.job_state[0] : j.job_state;
    if (String(j.name || '').startsWith(`obleth-${instance}-`) && ['PENDING', 'RUNNING', 'CONFIGURING'].includes(st)) {
      await fetch(`${env.OBLETH_SLURM_URL}/slurm/${v}/job/${j.job_id}`, { method: 'DELETE', headers: h });
    }
  }
}

/** A port range of 50 for this test process's engines (the harness cluster's nodes share 127.0.0.1). */
export function portRange() {
  const lo = 27000 + (process.pid % 40) * 50;
  return [lo, lo + 49];
}

/** Save the harness connection through the API (for tests that start with Slurm set up). */
export async function saveHarnessSettings(stack, extraDefaults = {}) {
  const env = clusterEnv();
  const r = await stack.api('PUT', '/api/v1/settings/slurm', { enabled: true, url: env.OBLETH_SLURM_URL,
    user: env.OBLETH_SLURM_USER, token: env.OBLETH_SLURM_TOKEN,
    defaults: { partition: 'gpu', account: 'research', log_dir: stack.logdir, port_range: portRange(), ...extraDefaults } });
  assert.equal(r.status, 200, r.text);
  return r.json;
}

/** Poll fn() until it returns a truthy value (API state, not the page); fails after timeout ms. */
export async function until(fn, { timeout = 60000, every = 250, what = 'condition' } = {}) {
  const t0 = Date.now();
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() - t0 > timeout) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, every));
  }
}

const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

/** Launch Debian's Chromium headless (never a downloaded browser). */
export async function browser() {
  return chromium.launch({ executablePath: process.env.OBLETH_CHROMIUM || '/usr/bin/chromium', args: FLAGS, headless: true });
}

/**
 * What most browser tests start from: obleth serve (+ provisioner) by startStack(stackOpts), the harness's
 * Slurm connection saved with extraDefaults, and a browser. {stack, b}, or {} when the harness cluster is
 * not up (the tests then skip). stopHarnessStack(stack, b) ends what it started.
 */
/** Wait until no job obleth submitted is still on the harness (pending, running, configuring or
 * completing), whichever test file's it was: a file starts on idle nodes, whatever the one before it
 * left ending (its cancels are sent, not waited for). */
export async function waitForNoJobs({ timeout = 120000 } = {}) {
  const env = clusterEnv();
  if (!env) return;
  const v = env.OBLETH_SLURM_API_VERSION || 'v0.0.38';
  const h = { 'X-SLURM-USER-NAME': env.OBLETH_SLURM_USER, 'X-SLURM-USER-TOKEN': env.OBLETH_SLURM_TOKEN };
  const live = ['PENDING', 'RUNNING', 'CONFIGURING', 'COMPLETING', 'SUSPENDED'];
  let left = [];
  try {
    await until(async () => {
      const r = await fetch(`${env.OBLETH_SLURM_URL}/slurm/${v}/jobs`, { headers: h });
      const jobs = (await r.json()).jobs || [];
      left = jobs.filter((j) => String(j.name || '').startsWith('obleth-')
        && [].concat(j.job_state).some((st) => live.includes(st)));
      return left.length === 0;
    }, { timeout, what: 'the jobs of earlier tests to end' });
  } catch (e) {
    // a job left behind on purpose by an earlier file (one Slurm keeps pending) must not stop this one
    console.warn(`support: jobs still on the harness: ${left.map((j) => j.job_id).join(', ')} (${e.message})`);
  }
}

export async function startHarnessStack(stackOpts, extraDefaults) {
  if (!clusterEnv()) return {};
  await waitForNoJobs();
  const stack = await startStack(stackOpts);
  await saveHarnessSettings(stack, extraDefaults);
  return { stack, b: await browser() };
}

export async function stopHarnessStack(stack, b) {
  if (b) await b.close();
  if (stack) await stack.stop();
}

/**
 * A page with everything a test checks recorded: JS dialogs (alert → a failure of escaping),
 * CSP violations and console errors, every response body (for the secrets check), requests to
 * any other origin. shot(step) writes build/web-screens/<name>-NN-<step>.png.
 */
export async function newPage(b, stack, name) {
  const context = await b.newContext({ viewport: { width: 1280, height: 720 }, baseURL: stack.base });
  const page = await context.newPage();
  const rec = { dialogs: [], csp: [], consoleErrors: [], bodies: [], foreign: [], pageErrors: [] };
  page.on('dialog', async (d) => { rec.dialogs.push(d.message()); await d.dismiss(); });
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    const t = m.text();
    if (/Content Security Policy|Refused to/i.test(t)) rec.csp.push(t);
    else rec.consoleErrors.push(t);
  });
  page.on('pageerror', (e) => rec.pageErrors.push(String(e)));
  page.on('request', (r) => { if (!r.url().startsWith(stack.base) && !r.url().startsWith('data:')) rec.foreign.push(r.url()); });
  page.on('response', async (r) => {
    try {
      const ct = r.headers()['content-type'] || '';
      if (/event-stream/.test(ct)) return; // a stream never ends; its events are small and checked by the server specs
      rec.bodies.push({ url: r.url(), body: await r.text() });
    } catch { /* body gone (navigation) */ }
  });
  mkdirSync(SCREENS, { recursive: true });
  let n = 0;
  const shot = async (step) => {
    n += 1;
    await page.screenshot({ path: path.join(SCREENS, `${name}-${String(n).padStart(2, '0')}-${step}.png`), fullPage: true });
  };
  return { page, context, rec, shot };
}

/** Run axe-core on the page as it is: no serious or critical violation. */
export async function axe(page, label) {
  // evaluated through the DevTools protocol: the page's CSP (script-src 'self') stays on
  const has = await page.evaluate('typeof window.axe');
  if (has !== 'object') await page.evaluate(axeSource);
  const res = await page.evaluate(async () => window.axe.run(document, { resultTypes: ['violations'] }));
  const bad = res.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  assert.deepEqual(bad.map((v) => `${v.id} (${v.impact}): ${v.help} — ${v.nodes.slice(0, 3).map((nd) => nd.target.join(' ')).join(', ')}`), [],
    `axe-core on ${label}`);
}

/** Sign in through the page (the token typed once, as a person would). */
export async function signIn(page, stack) {
  await page.goto('/signin');
  await page.getByLabel('Admin token').fill(stack.token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL((u) => !u.pathname.startsWith('/signin'));
}

/** Nothing went wrong in the page: no JS dialog, no CSP violation, no uncaught error, nothing fetched elsewhere. */
export function assertClean(rec) {
  assert.deepEqual(rec.dialogs, [], 'the page opened a JS dialog');
  assert.deepEqual(rec.csp, [], 'CSP violations');
  assert.deepEqual(rec.pageErrors, [], 'uncaught errors in the page');
  assert.deepEqual(rec.foreign, [], 'requests to another origin');
}

/**
 * Reach a control with the Tab key alone (as a keyboard user would) and press Enter on it.
 * name: the control's accessible name (aria-label, else its text), a string or RegExp.
 */
export async function pressWithKeyboard(page, name, { key = 'Enter', max = 120 } = {}) {
  const want = typeof name === 'string' ? (s) => s === name : (s) => name.test(s);
  // start from the top of the document
  await page.evaluate(() => { if (document.activeElement) document.activeElement.blur(); });
  for (let i = 0; i < max; i++) {
    await page.keyboard.press('Tab');
    const got = await page.evaluate(() => {
      const a = document.activeElement;
      if (!a || a === document.body) return '';
      return (a.getAttribute('aria-label') || a.innerText || a.value || '').trim();
    });
    if (want(got)) { await page.keyboard.press(key); return; }
  }
  throw new Error(`no control named ${name} is reachable with Tab`);
}

/** Launch the smoke-test recipe through the API (as a script would); returns the model id. */
export async function launchSmoke(stack, name, values = {}) {
  const r = await stack.api('POST', '/api/v1/deployments/launch', { recipe_id: 'smoke-test', api_model_name: name, values });
  assert.equal(r.status, 201, r.text);
  return r.json.model.id;
}

/** The model's replicas from the API. */
export async function replicasOf(stack, modelId) {
  return (await stack.api('GET', `/api/v1/models/${modelId}/replicas`)).json.replicas;
}

/** Live Slurm jobs of this stack's installation (from slurmrestd itself), optionally of one model. */
export async function liveJobs(stack, modelId = null) {
  const env = clusterEnv();
  const instance = (await stack.api('GET', '/api/v1/provisioner/snapshot')).json.instance;
  const v = env.OBLETH_SLURM_API_VERSION || 'v0.0.38';
  const r = await fetch(`${env.OBLETH_SLURM_URL}/slurm/${v}/jobs`, { headers: {
    'X-SLURM-USER-NAME': env.OBLETH_SLURM_USER, 'X-SLURM-USER-TOKEN': env.OBLETH_SLURM_TOKEN } });
  const prefix = modelId == null ? `obleth-${instance}-` : `obleth-${instance}-m${modelId}-`;
  return ((await r.json()).jobs || []).filter((j) => {
    const st = Array.isArray(j.job_state) ? j.job_state[0] : j.job_state;
    return String(j.name || '').startsWith(prefix) && ['PENDING', 'RUNNING', 'CONFIGURING'].includes(st);
  });
}

/**
 * Record, inside the page, every data-state each replica row shows (rows are <tr data-state> in the
 * Replicas table), without reloading: returns a function giving {slot: [states in order]}.
 */
export async function recordReplicaStates(page) {
  await page.evaluate(() => {
    window.__seen = {};
    window.__seenAt = {};
    window.__loaded = performance.timeOrigin;
    const take = () => {
      for (const tr of document.querySelectorAll('table.replicas tbody tr')) {
        const slot = tr.querySelector('th').firstChild.textContent.trim();
        const st = tr.dataset.state;
        const a = (window.__seen[slot] ||= []);
        if (a[a.length - 1] !== st) a.push(st);
        window.__seenAt[`${slot}:${st}`] ??= Date.now();
      }
    };
    take();
    new MutationObserver(take).observe(document.body, { subtree: true, childList: true, attributes: true, characterData: true });
  });
  const origin = await page.evaluate(() => performance.timeOrigin);
  return async () => {
    const same = await page.evaluate(() => window.__loaded);
    assert.equal(same, origin, 'the page reloaded');
    return page.evaluate(() => window.__seen);
  };
}

/** When the page first showed each "slot:state" (epoch ms, the machine's clock). */
export async function shownAt(page) {
  return page.evaluate(() => window.__seenAt);
}

/**
 * Poll the API (every 100 ms) for when each "slot:state" of a model's replicas first appears;
 * stop() returns {"slot:state": epoch ms}.
 */
export function watchApiStates(stack, modelId) {
  const at = {};
  let on = true;
  const done = (async () => {
    while (on) {
      const r = await stack.api('GET', `/api/v1/models/${modelId}/replicas?state=live`);
      const now = Date.now();
      for (const rep of (r.json && r.json.replicas) || []) at[`${rep.slot}:${rep.state}`] ??= now;
      await new Promise((res) => setTimeout(res, 100));
    }
  })();
  return async () => { on = false; await done; return at; };
}

/**
 * Wait until fn() (run in the page) is truthy. Playwright's waitForFunction polls with eval, which the
 * page's CSP (rightly) refuses; page.evaluate goes through the DevTools protocol instead.
 */
export async function waitInPage(page, fn, what, timeout = 10000) {
  return until(() => page.evaluate(fn), { timeout, every: 100, what });
}
