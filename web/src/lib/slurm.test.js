import { test } from 'node:test';
import assert from 'node:assert/strict';
import { jwtStatus, errorWords, provisionerStatus, leaseWords, tokenSourceWords, policyErrors } from './slurm.js';

const now = 1_800_000_000;

// the server's thresholds (GET /settings/slurm `thresholds`), given as the page gets them
const DAY = 86400;

test('a JWT far from expiry is fine, near expiry warns, past expiry says expired', () => {
  assert.deepEqual(jwtStatus(now + 2 * DAY, now, true, DAY), { level: 'ok', text: 'expires in 2 d' });
  assert.equal(jwtStatus(now + DAY - 60, now, true, DAY).level, 'warn');
  assert.match(jwtStatus(now + 3600, now, true, DAY).text, /in 1 h — renew it soon/);
  assert.deepEqual(jwtStatus(now - 120, now), { level: 'expired', text: 'expired 2 min ago' });
  assert.equal(jwtStatus(null, now).level, 'unknown');
  assert.equal(jwtStatus(null, now, false).text, 'no JWT saved');
});

test('the JWT warning starts where the server says, not at a number of the page\'s own', () => {
  // 12 h left: inside the server's day, outside the six hours the page used to keep
  assert.equal(jwtStatus(now + 12 * 3600, now, true, DAY).level, 'warn');
  assert.equal(jwtStatus(now + 12 * 3600, now, true, 3600).level, 'ok');
});

test('connection errors are said in plain words and keep the detail', () => {
  const e = errorWords({ code: 'auth', message: 'HTTP 401' });
  assert.equal(e.code, 'auth');
  assert.match(e.text, /refused the credentials/);
  assert.equal(e.detail, 'HTTP 401');
  assert.equal(errorWords({ code: 'unreachable', message: 'SSL certificate problem' }).code, 'tls');
  assert.match(errorWords({ code: 'unreachable', message: 'Connection refused' }).text, /could not be reached/);
  assert.match(errorWords({ code: 'timeout' }).text, /in time/);
  assert.equal(errorWords(null), null);
});

test('the provisioner status says when it checked in and how many passes fail in a row', () => {
  assert.equal(provisionerStatus(null, now).level, 'unknown');
  assert.deepEqual(provisionerStatus({ checked_in_at: now - 3, failed_passes: 0 }, now),
    { level: 'ok', text: 'Provisioner checked in just now.' });
  const f = provisionerStatus({ checked_in_at: now - 60, failed_passes: 3, last_error: 'slurm: timeout' }, now);
  assert.equal(f.level, 'error');
  assert.equal(f.text, 'Provisioner checked in 1 min ago; 3 passes failing in a row.');
  assert.equal(f.error, 'slurm: timeout');
  assert.equal(provisionerStatus({ checked_in_at: now - 1, failed_passes: 1 }, now).text,
    'Provisioner checked in just now; 1 pass failing in a row.');
  assert.equal(provisionerStatus({ checked_in_at: now - 600, failed_passes: 0 }, now, 60).level, 'warn');
});

test('the provisioner is stale after the server\'s threshold, the one the router\'s 503s use', () => {
  // 90 s: past the server's 60 s, short of the 120 s the page used to keep
  assert.equal(provisionerStatus({ checked_in_at: now - 90, failed_passes: 0 }, now, 60).level, 'warn');
  assert.equal(provisionerStatus({ checked_in_at: now - 90, failed_passes: 0 }, now, 120).level, 'ok');
});

test('lease and token source are described when the server reports them', () => {
  assert.equal(leaseWords({ holder: 'prov-1', host: 'adm1', pid: 42, expires_at: now + 30 }, now),
    'prov-1 on adm1 pid 42; lease ends in 30 s');
  assert.equal(leaseWords(null, now), null);
  assert.equal(tokenSourceWords('static'), 'a saved JWT');
  assert.equal(tokenSourceWords(undefined), null);
});

test('policy files that do not load are named with their file and line, for serve and for the provisioner', () => {
  assert.deepEqual(policyErrors({}), []);
  assert.deepEqual(policyErrors({
    serve_policy_errors: [{ policy: 'suggestions', file: '/etc/obleth/policy.d/suggestions.lua', line: 1,
      message: '/etc/obleth/policy.d/suggestions.lua:1: unexpected symbol' }],
    provisioner: { policy_error: { file: '/etc/obleth/policy.d/lost.lua', line: null, message: 'lost.check must be a function' } },
  }), [
    { who: 'obleth serve', where: '/etc/obleth/policy.d/suggestions.lua:1', message: 'unexpected symbol' },
    { who: 'the provisioner', where: '/etc/obleth/policy.d/lost.lua', message: 'lost.check must be a function' },
  ]);
});
