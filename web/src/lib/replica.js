// A replica's progress and timing as the deployment page shows them. The
// provisioner decides the state; this only lays the states out as steps.
import { duration } from './format.js';

/**
 * Every replica state in words (the states of docs/replicas-and-failures.md, DESIGN's "replica"). The
 * page never shows a state's raw name.
 */
export const STATE_LABELS = {
  pending: 'Waiting to submit',
  submitted: 'Queued in Slurm',
  starting: 'Starting',
  healthy: 'Healthy',
  unhealthy: 'Unhealthy',
  ending: 'Ending',
  ended: 'Ended',
  lost: 'Lost',
};

/** A state's label; a state this page does not know yet is said as such, with its name. */
export function stateLabel(state) {
  return STATE_LABELS[state] || `Unknown state “${state}”`;
}

/** The steps a replica walks through while it comes up, in order. */
export const STEPS = ['pending', 'submitted', 'starting', 'healthy'].map((key) => ({ key, label: STATE_LABELS[key] }));

// what a state off the path means, in the words of docs/replicas-and-failures.md
const OFF_PATH = {
  unhealthy: 'failing health checks, out of the endpoints',
  ending: 'a cancel was sent (restart, pause, surplus, rollover drain) or Slurm is ending the job',
  ended: 'the job is over; Slurm\'s end state and reason are beside it',
  lost: 'ended too often in a row, not replaced until “Try once more”',
};

/** Steps with their status (done / current / todo), and what is off the path, if anything. */
export function progress(r) {
  // Slurm refused the submit: no job ever existed, so no step was reached (not even Waiting to submit)
  if (r.end && r.end.state === 'REFUSED' && r.job_id == null) {
    const steps = STEPS.map((s) => ({ ...s, status: 'todo' }));
    return { steps, off: { state: 'refused', label: 'Refused by Slurm: no job was created', name: 'Refused by Slurm', why: 'no job was created' } };
  }
  const idx = STEPS.findIndex((s) => s.key === r.state);
  let reached = idx;
  if (idx < 0) { // off the path: the furthest step it had reached
    reached = r.healthy_at != null ? 3 : r.started_at != null ? 2 : r.job_id != null ? 1 : 0;
  }
  const steps = STEPS.map((s, i) => ({ ...s,
    status: i < reached || (i === reached && idx < 0) ? 'done' : i === reached ? 'current' : 'todo' }));
  if (r.state === 'healthy') steps[3].status = 'done';
  if (idx >= 0) return { steps, off: null };
  const label = stateLabel(r.state);
  const why = OFF_PATH[r.state] || '';
  return { steps, off: { state: r.state, label: why ? `${label}: ${why}` : label, name: label, why } };
}

/** One line saying where the replica is, for screen readers and the live region. */
export function stepText(r) {
  const p = progress(r);
  if (p.off) return p.off.label;
  const cur = p.steps.find((s) => s.status === 'current') || p.steps[p.steps.length - 1];
  let t = cur.label;
  if (r.state === 'submitted' && r.pending_reason) t += ` (pending: ${r.pending_reason})`;
  return t;
}

/** Seconds before the job's time limit, or null when unknown. timeLimit in minutes. */
export function secondsLeft(r, timeLimit, now) {
  if (['ended', 'lost', 'pending'].includes(r.state)) return null;
  const s = r.slurm || {};
  if (s.end_time != null && !s.estimated) return s.end_time - now;
  const limit = s.time_limit ?? timeLimit;
  if (r.started_at != null && limit != null && Number.isFinite(limit)) return r.started_at + limit * 60 - now;
  return null;
}

/** Time left in words ("1 h 20 min", "over the limit"), or "—". */
export function timeLeftText(r, timeLimit, now) {
  const left = secondsLeft(r, timeLimit, now);
  if (left == null) return '—';
  return left <= 0 ? 'at the limit' : duration(left);
}

/** Counts for the models list: healthy / wanted. */
export function healthyCount(replicas) {
  return replicas.filter((r) => r.state === 'healthy').length;
}

/** Replicas worth a row: live ones, and ended / lost ones of each slot that has no live replica. */
export function visibleReplicas(replicas) {
  const live = replicas.filter((r) => r.state !== 'ended');
  const liveSlots = new Set(live.map((r) => r.slot));
  const lastEnded = new Map();
  for (const r of replicas) {
    if (r.state !== 'ended' || liveSlots.has(r.slot)) continue;
    const cur = lastEnded.get(r.slot);
    if (!cur || (r.ended_at ?? 0) > (cur.ended_at ?? 0)) lastEnded.set(r.slot, r);
  }
  return [...live, ...lastEnded.values()].sort((a, b) => a.slot - b.slot || b.id - a.id);
}

/** Slurm end states an operator did not ask for (the job failed), shown as trouble. */
const FAILED_ENDS = new Set(['FAILED', 'TIMEOUT', 'OUT_OF_MEMORY', 'NODE_FAIL', 'BOOT_FAIL', 'DEADLINE', 'PREEMPTED']);

/** The badge style of a job outcome: "bad" for a failure, "muted" for a cancel or a normal end. */
export function outcomeLevel(state) {
  return FAILED_ENDS.has(String(state || '').split(' ')[0]) ? 'bad' : 'muted';
}
