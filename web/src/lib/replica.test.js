import { test } from 'node:test';
import assert from 'node:assert/strict';
import { progress, stepText, secondsLeft, timeLeftText, healthyCount, visibleReplicas, outcomeLevel } from './replica.js';

const statuses = (r) => progress(r).steps.map((s) => s.status).join(',');

test('a replica coming up marks the steps before it done and its own step current', () => {
  assert.equal(statuses({ state: 'pending' }), 'current,todo,todo,todo');
  assert.equal(statuses({ state: 'submitted', job_id: 7 }), 'done,current,todo,todo');
  assert.equal(statuses({ state: 'starting', job_id: 7 }), 'done,done,current,todo');
  assert.equal(statuses({ state: 'healthy', job_id: 7 }), 'done,done,done,done');
  assert.equal(progress({ state: 'healthy' }).off, null);
});

test('a replica off the path keeps the steps it reached and says what happened', () => {
  const p = progress({ state: 'lost', job_id: 9, started_at: 100 });
  assert.equal(p.steps.map((s) => s.status).join(','), 'done,done,done,todo');
  assert.equal(p.off.state, 'lost');
  assert.match(p.off.label, /Try once more/);
  assert.equal(statuses({ state: 'unhealthy', job_id: 1, started_at: 1, healthy_at: 2 }), 'done,done,done,done');
});

test('a queued replica says Slurm\'s pending reason', () => {
  assert.equal(stepText({ state: 'submitted', job_id: 3, pending_reason: 'Resources' }),
    'Queued in Slurm (pending: Resources)');
  assert.equal(stepText({ state: 'starting', job_id: 3 }), 'Starting');
});

test('time left comes from Slurm\'s end time when known, else start + time limit', () => {
  const now = 10_000;
  assert.equal(secondsLeft({ state: 'healthy', slurm: { end_time: now + 600 } }, 30, now), 600);
  assert.equal(secondsLeft({ state: 'healthy', started_at: now - 600 }, 30, now), 1200);
  assert.equal(secondsLeft({ state: 'submitted', slurm: { end_time: now + 99, estimated: true } }, 30, now), null);
  assert.equal(secondsLeft({ state: 'ended', started_at: now - 5 }, 30, now), null);
  assert.equal(timeLeftText({ state: 'healthy', started_at: now - 600 }, 30, now), '20 min');
  assert.equal(timeLeftText({ state: 'healthy', started_at: now - 3600 }, 30, now), 'at the limit');
  assert.equal(timeLeftText({ state: 'pending' }, 30, now), '—');
});

test('the list shows live replicas and only the newest ended one of an otherwise empty slot', () => {
  const rs = [
    { id: 1, slot: 1, state: 'ended', ended_at: 5 },
    { id: 2, slot: 1, state: 'healthy' },
    { id: 3, slot: 2, state: 'ended', ended_at: 5 },
    { id: 4, slot: 2, state: 'ended', ended_at: 9 },
  ];
  assert.deepEqual(visibleReplicas(rs).map((r) => r.id), [2, 4]);
  assert.equal(healthyCount(rs), 1);
});

test('a job that failed shows as trouble; a cancelled or completed one does not', () => {
  assert.equal(outcomeLevel('TIMEOUT'), 'bad');
  assert.equal(outcomeLevel('OUT_OF_MEMORY'), 'bad');
  assert.equal(outcomeLevel('NODE_FAIL'), 'bad');
  assert.equal(outcomeLevel('CANCELLED'), 'muted');
  assert.equal(outcomeLevel('COMPLETED'), 'muted');
});

test('every replica state of docs/replicas-and-failures.md has a label in words, never its raw name', async () => {
  const { readFileSync } = await import('node:fs');
  const { stateLabel, STATE_LABELS } = await import('./replica.js');
  const doc = readFileSync(new URL('../../../docs/replicas-and-failures.md', import.meta.url), 'utf8');
  const section = doc.split('## Replica states')[1].split('\n## ')[0];
  const states = [...section.matchAll(/^\| `([a-z_]+)` \|/gm)].map((m) => m[1]);
  assert.deepEqual(states, ['pending', 'submitted', 'starting', 'healthy', 'unhealthy', 'ending', 'ended', 'lost']);
  assert.deepEqual(Object.keys(STATE_LABELS).sort(), [...states].sort());
  for (const s of states) {
    const label = stateLabel(s);
    assert.ok(label && label !== s, `${s} has no label`);
    assert.match(label, /^[A-Z]/);
    // what the page says about a replica in that state uses the label too
    const said = stepText({ state: s, job_id: 1, started_at: 1 });
    assert.ok(said.startsWith(label), `${s}: "${said}" does not start with "${label}"`);
  }
  assert.equal(stateLabel('pending'), 'Waiting to submit');
  assert.equal(stateLabel('submitted'), 'Queued in Slurm');
  assert.match(progress({ state: 'ended', job_id: 1 }).off.why, /job is over/);
  assert.match(progress({ state: 'lost', job_id: 1 }).off.why, /Try once more/);
});

test('a submit Slurm refused reached no step: no job was created, it is not drawn as submitted', () => {
  const p = progress({ state: 'ended', job_id: null, end: { state: 'REFUSED', reason: 'Invalid partition name specified' } });
  assert.deepEqual(p.steps.map((s) => s.status), ['todo', 'todo', 'todo', 'todo']);
  assert.equal(p.off.name, 'Refused by Slurm');
  assert.equal(p.off.label, 'Refused by Slurm: no job was created');
});
