import { test } from 'node:test';
import assert from 'node:assert/strict';
import { duration, relative, timestamp, minutes, memory, count } from './format.js';

test('durations read like an operator says them', () => {
  assert.equal(duration(0), '0 s');
  assert.equal(duration(59), '59 s');
  assert.equal(duration(60), '1 min');
  assert.equal(duration(3599), '59 min');
  assert.equal(duration(3 * 3600 + 20 * 60), '3 h 20 min');
  assert.equal(duration(4 * 3600), '4 h');
  assert.equal(duration(50 * 3600), '2 d 2 h');
  assert.equal(duration(-90), '1 min');
  assert.equal(duration(null), '—');
});

test('relative times say in / ago, and "just now" within 5 s', () => {
  assert.equal(relative(1000 + 7200, 1000), 'in 2 h');
  assert.equal(relative(1000 - 300, 1000), '5 min ago');
  assert.equal(relative(1003, 1000), 'just now');
  assert.equal(relative(null, 1000), 'never');
});

test('timestamps are UTC, like Slurm logs on most clusters', () => {
  assert.equal(timestamp(0), '1970-01-01 00:00:00 UTC');
  assert.equal(timestamp(1796083200 + 3661), '2026-12-01 01:01:01 UTC');
  assert.equal(timestamp(null), '—');
});

test('Slurm time limits in minutes and memory in MiB', () => {
  assert.equal(minutes(30), '30 min');
  assert.equal(minutes(240), '4 h');
  assert.equal(memory(0), 'whole node');
  assert.equal(memory(512), '512 MiB');
  assert.equal(memory(32000), '31.3 GiB');
  assert.equal(memory(2048), '2 GiB');
  assert.equal(count('replica', 1), '1 replica');
  assert.equal(count('replica', 2), '2 replicas');
});
