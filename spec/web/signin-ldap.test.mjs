// The sign-in page with the site's directory (docs/access.md "LDAP"): Debian's slapd started here on
// loopback (slapadd into a temp dir, slapd -f; stopped at the end) with alice in hpc-ops (mapped to
// operator in policy.d) and bob in no group. The page shows user + password fields because the
// server says so (GET /api/v1/session/methods); alice sees New deployment, bob does not; a wrong
// password says so; the admin token still signs in. Needs no Slurm cluster.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { newPage, axe, assertClean, startStack, browser, until, freePort } from './support.mjs';

const SLAPD = '/usr/sbin/slapd';
const skip = !existsSync(SLAPD) && 'no slapd (scripts/deps.sh all installs it)';
let URL; // ldap://127.0.0.1:PORT, PORT from OBLETH_TEST_SLAPD_WEB_PORT or the kernel (before)
const SUFFIX = 'dc=example,dc=org';
let dir;
let stack;
let b;

function slapdPid() {
  try { return Number(readFileSync(path.join(dir, 'slapd.pid'), 'utf8').trim()); } catch { return 0; }
}

before(async () => {
  URL = `ldap://127.0.0.1:${Number(process.env.OBLETH_TEST_SLAPD_WEB_PORT) || await freePort()}`;
  if (skip) return;
  dir = mkdtempSync(path.join(os.tmpdir(), 'obleth-ldap-web-'));
  mkdirSync(path.join(dir, 'db'));
  mkdirSync(path.join(dir, 'policy.d'));
  writeFileSync(path.join(dir, 'slapd.conf'), `include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/nis.schema
include /etc/ldap/schema/inetorgperson.schema
pidfile ${dir}/slapd.pid
modulepath /usr/lib/ldap
moduleload back_mdb
database mdb
maxsize 10485760
suffix "${SUFFIX}"
rootdn "cn=admin,${SUFFIX}"
rootpw admin-secret
directory ${dir}/db
access to attrs=userPassword by anonymous auth by self read by * none
access to * by * read
`);
  const person = (uid) => `dn: uid=${uid},ou=people,${SUFFIX}\nobjectClass: inetOrgPerson\nuid: ${uid}\ncn: ${uid}\nsn: ${uid}\nuserPassword: ${uid}-pw\n`;
  writeFileSync(path.join(dir, 'data.ldif'), [
    `dn: ${SUFFIX}\nobjectClass: dcObject\nobjectClass: organization\ndc: example\no: Example\n`,
    `dn: ou=people,${SUFFIX}\nobjectClass: organizationalUnit\nou: people\n`,
    `dn: ou=groups,${SUFFIX}\nobjectClass: organizationalUnit\nou: groups\n`,
    person('alice'), person('bob'),
    `dn: cn=hpc-ops,ou=groups,${SUFFIX}\nobjectClass: groupOfNames\ncn: hpc-ops\nmember: uid=alice,ou=people,${SUFFIX}\n`,
  ].join('\n'));
  writeFileSync(path.join(dir, 'policy.d', 'access.lua'),
    'return { DEFAULTS = { group_roles = { ["hpc-ops"] = "operator" } } }\n');
  execFileSync('/usr/sbin/slapadd', ['-q', '-f', path.join(dir, 'slapd.conf'), '-l', path.join(dir, 'data.ldif')]);
  execFileSync(SLAPD, ['-f', path.join(dir, 'slapd.conf'), '-h', `${URL}/`]);
  await until(() => {
    try { execFileSync('ldapsearch', ['-x', '-H', URL, '-b', SUFFIX, '-s', 'base', 'dn'], { stdio: 'ignore' }); return true; } catch { return false; }
  }, { timeout: 20000, what: 'slapd to answer' });
  stack = await startStack({ provisioner: false, serveEnv: { OBLETH_LDAP_URL: URL,
    OBLETH_LDAP_USER_BASE: `ou=people,${SUFFIX}`, OBLETH_LDAP_GROUP_BASE: `ou=groups,${SUFFIX}`,
    OBLETH_POLICY_DIR: path.join(dir, 'policy.d') } });
  b = await browser();
});

after(async () => {
  if (b) await b.close();
  if (stack) await stack.stop();
  if (dir) {
    const pid = slapdPid();
    if (pid) {
      try { process.kill(pid, 'SIGTERM'); } catch { /* gone */ }
      await until(() => { try { process.kill(pid, 0); return false; } catch { return true; } },
        { timeout: 10000, what: 'slapd to stop' }).catch(() => {});
    }
    rmSync(dir, { recursive: true, force: true });
  }
});

async function signInAs(page, user, password) {
  await page.goto('/signin');
  await page.getByLabel('User name').fill(user);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
}

test('LDAP: user + password fields; alice (operator) may launch, bob (viewer) may not', { skip }, async () => {
  const { page, rec, shot } = await newPage(b, stack, 'signin-ldap');
  await page.goto('/signin');
  await page.getByLabel('User name').waitFor();
  await shot('fields');
  await axe(page, 'Sign in with the directory');
  await signInAs(page, 'alice', 'wrong');
  await page.getByText('Wrong user name or password.').waitFor();
  await signInAs(page, 'alice', 'alice-pw');
  await page.waitForURL((u) => !u.pathname.startsWith('/signin'));
  await page.getByRole('link', { name: 'New deployment' }).waitFor();
  const s = await page.evaluate(async () => (await fetch('/api/v1/session')).json());
  assert.deepEqual([s.user, s.role, s.via], ['alice', 'operator', 'session']);
  await shot('alice');

  const bob = await newPage(b, stack, 'signin-ldap-bob');
  await signInAs(bob.page, 'bob', 'bob-pw');
  await bob.page.waitForURL((u) => !u.pathname.startsWith('/signin'));
  await bob.page.getByRole('heading', { level: 1 }).first().waitFor();
  const sb = await bob.page.evaluate(async () => (await fetch('/api/v1/session')).json());
  assert.deepEqual([sb.user, sb.role], ['bob', 'viewer']);
  assert.equal(await bob.page.getByRole('link', { name: 'New deployment' }).count(), 0);
  await bob.shot('bob');
  assertClean(rec);
  assertClean(bob.rec);
});

test('LDAP: the admin token still signs in', { skip }, async () => {
  const { page, rec } = await newPage(b, stack, 'signin-ldap-token');
  await page.goto('/signin');
  await page.getByLabel('User name').waitFor();
  await page.getByRole('button', { name: 'Use the admin token' }).click();
  await page.getByLabel('Admin token').fill(stack.token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL((u) => !u.pathname.startsWith('/signin'));
  const s = await page.evaluate(async () => (await fetch('/api/v1/session')).json());
  assert.equal(s.role, 'admin');
  assertClean(rec);
});
