import { test } from 'node:test';
import assert from 'node:assert/strict';
import { limitsText, usageText, limitValue } from './keys.js';

test('a key\'s limits in words', () => {
  assert.equal(limitsText({ requests_per_minute: 5, max_concurrent: 2 }), '5 a minute · 2 at once');
  assert.equal(limitsText({ requests_per_minute: 5, max_concurrent: null }), '5 a minute');
  assert.equal(limitsText({ requests_per_minute: null, max_concurrent: null }), 'no limit');
});

test('a key\'s usage in words: requests, tokens when the engines reported any, and refusals', () => {
  assert.equal(usageText({ requests: 6, limited: 1, prompt_tokens: 18, completion_tokens: 24 }),
    '6 requests · 42 tokens (18 prompt, 24 completion) · 1 refused by a limit');
  assert.equal(usageText({ requests: 1, limited: 0, prompt_tokens: 0, completion_tokens: 0 }), '1 request');
});

test('an empty limit field is no limit; a number is sent as typed for the server to check', () => {
  assert.equal(limitValue(''), null);
  assert.equal(limitValue(' 5 '), 5);
  assert.equal(limitValue('x'), 'x');
});
