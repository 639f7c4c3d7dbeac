// Two obleth serve on one PostgreSQL (Debian's, started here by spec/support/pg.sh on a unix socket):
// a browser signed in on one instance follows, without a reload, a client key created and then revoked
// through the other (the change goes through PostgreSQL's LISTEN / NOTIFY to the first instance's
// event stream). Needs no harness cluster.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, existsSync, chmodSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { ROOT, browser, newPage, signIn, assertClean } from './support.mjs';

const PG = path.join(ROOT, 'spec', 'support', 'pg.sh');
const skip = !existsSync('/usr/lib/postgresql/15/bin/initdb') && 'no PostgreSQL 15 (scripts/deps.sh all)';
let dir;
let b;
const serves = [];

function serve(url, token) {
  const child = spawn(path.join(ROOT, 'build', 'obleth'), ['serve', '--listen', '127.0.0.1:0', '--db', url],
    { cwd: ROOT, env: { ...process.env, OBLETH_ADMIN_TOKEN: token }, stdio: ['ignore', 'pipe', 'pipe'] });
  serves.push(child);
  let out = '';
  return new Promise((resolve, reject) => {
    child.stdout.on('data', (d) => {
      out += d;
      const m = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(out);
      if (m) resolve(m[1]);
    });
    child.on('exit', (code) => reject(new Error(`obleth serve exited (${code}): ${out}`)));
  });
}

function stackOf(base, token) {
  const api = async (method, p, body) => {
    const res = await fetch(base + p, { method, headers: { Authorization: `Bearer ${token}`,
      ...(body !== undefined ? { 'Content-Type': 'application/json' } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    return { status: res.status, json: text ? JSON.parse(text) : null };
  };
  return { base, token, api };
}

let one;
let two;
before(async () => {
  if (skip) return;
  dir = mkdtempSync(path.join(os.tmpdir(), 'obleth-web-pg-'));
  chmodSync(dir, 0o755); // PostgreSQL runs as the postgres user when this runs as root
  const url = execFileSync(PG, ['start', path.join(dir, 'pg')], { encoding: 'utf8' }).trim();
  const token = randomBytes(24).toString('hex');
  one = stackOf(await serve(url, token), token);
  two = stackOf(await serve(url, token), token);
  b = await browser();
});
after(async () => {
  if (b) await b.close();
  await Promise.all(serves.map((c) => new Promise((resolve) => {
    if (c.exitCode !== null || c.signalCode !== null) { resolve(); return; }
    c.once('exit', resolve);
    c.kill('SIGTERM');
  })));
  if (dir) {
    execFileSync(PG, ['stop', path.join(dir, 'pg')]);
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a browser on one instance follows a client key created and revoked through another', { skip }, async () => {
  const { page, rec, shot } = await newPage(b, one, 'shared-instances');
  await signIn(page, one);
  await page.getByRole('link', { name: 'Client keys' }).click();
  await page.getByRole('heading', { level: 1, name: 'Client keys' }).waitFor();
  await page.getByText('No client keys yet.').waitFor();
  // the page's event stream is open before the change is made
  await page.waitForFunction(() => !document.body.innerText.includes('Reconnecting'), null, { timeout: 10000 });

  const made = await two.api('POST', '/api/v1/keys', { name: 'made on the other instance' });
  assert.equal(made.status, 201);
  const row = page.getByRole('row', { name: /made on the other instance/ });
  await row.waitFor({ timeout: 5000 }); // no reload: the change came through PostgreSQL
  await shot('created-elsewhere');

  assert.equal((await two.api('DELETE', `/api/v1/keys/${made.json.id}`)).status, 200);
  await row.getByText('revoked').waitFor({ timeout: 5000 });
  await shot('revoked-elsewhere');
  assertClean(rec);
});
