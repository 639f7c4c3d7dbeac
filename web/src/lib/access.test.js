import { test } from 'node:test';
import assert from 'node:assert/strict';
import { auditQuery, auditHref, utcInputToEpoch, epochToUtcInput, viaText, summaryText, moreNote, tokenState,
  tokenColumns } from './access.js';

test('the audit query keeps only the route\'s filters, trimmed, without empty ones', () => {
  const s = new URLSearchParams('user=%20alice%20&model=&since=1765000000&limit=20&x=1');
  assert.deepEqual(auditQuery(s), { user: 'alice', since: '1765000000', limit: '20' });
  // the page asks for its own number when the URL names none, so it knows when there may be more
  assert.deepEqual(auditQuery(new URLSearchParams('')), { limit: '100' });
});

test('the audit page\'s URL carries the filters set, in the route\'s order', () => {
  assert.equal(auditHref({ limit: 20, user: 'alice', model: ' ' }), '/audit?user=alice&limit=20');
  assert.equal(auditHref({}), '/audit');
  assert.equal(auditHref({ user: 'a&b=c' }), '/audit?user=a%26b%3Dc');
});

test('a time typed in UTC is epoch seconds, and back', () => {
  // 2026-12-06 06:05:00 UTC = 1796537100 (date -u -d '2026-12-06 06:05:00' +%s)
  assert.equal(utcInputToEpoch('2026-12-06T06:05'), 1796537100);
  assert.equal(utcInputToEpoch('2026-12-06T06:05:09'), 1796537109);
  assert.equal(utcInputToEpoch(''), null);
  assert.equal(utcInputToEpoch('yesterday'), 'yesterday');
  assert.equal(epochToUtcInput(1796537109), '2026-12-06T06:05:09');
  assert.equal(epochToUtcInput('1796537109'), '2026-12-06T06:05:09');
  assert.equal(epochToUtcInput('abc'), '');
  assert.equal(epochToUtcInput(null), '');
});

test('how an actor came in, in words, with the role', () => {
  assert.equal(viaText({ via: 'pat', role: 'operator' }), 'personal token · operator');
  assert.equal(viaText({ via: 'token', role: 'admin' }), 'admin token · admin');
  assert.equal(viaText({ via: 'proxy', role: null }), 'single sign-on');
  assert.equal(viaText({ via: 'other' }), 'other');
});

test('a change\'s summary as text: JSON, cut or refused said first, nothing for no body', () => {
  assert.equal(summaryText(null), '');
  assert.equal(summaryText({ name: 'k', key: '***' }), '{\n  "name": "k",\n  "key": "***"\n}');
  assert.equal(summaryText({ cut: true, text: '{"a":' }), '(cut: longer than the trail keeps)\n{"a":');
  assert.equal(summaryText({ cut: true, refused: true }), '(the summary could not be kept)');
  assert.equal(summaryText('<b>x</b>'), '<b>x</b>');
});

test('a list as long as its limit may have more; a shorter one holds them all', () => {
  assert.equal(moreNote(99, '100'), null);
  assert.match(moreNote(100, '100'), /newest 100/);
  assert.equal(moreNote(5, 'x'), null);
  assert.match(moreNote(20, '20'), /newest 20/);
  assert.equal(moreNote(3, '20'), null);
});

test('a token is revoked, expired or active', () => {
  const now = 1000;
  assert.equal(tokenState({ revoked_at: 900, expires_at: null }, now), 'revoked');
  assert.equal(tokenState({ revoked_at: null, expires_at: 1000 }, now), 'expired');
  assert.equal(tokenState({ revoked_at: null, expires_at: 2000 }, now), 'active');
  assert.equal(tokenState({ revoked_at: null }, now), 'active');
});

test('the token list shows last use, expiry and the user only when there is something to show', () => {
  const mine = [{ user: 'alice', revoked_at: null }];
  assert.deepEqual(tokenColumns(mine, 'alice'), { user: false, lastUsed: false, expires: false });
  assert.deepEqual(tokenColumns([...mine, { user: 'bob', last_used_at: null, expires_at: 5 }], 'alice'),
    { user: true, lastUsed: true, expires: true });
  assert.deepEqual(tokenColumns(mine, null).user, true);
});
