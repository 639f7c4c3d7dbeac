import { test } from 'node:test';
import assert from 'node:assert/strict';
import { specValues, provenanceText, requestBody, toYaml, valuesFromYaml, changes, typed, partitionText, fieldMeta } from './launch-form.js';

test('each provenance is said in the product page\'s words', () => {
  assert.equal(provenanceText('learned'), 'Learned from past launches');
  assert.equal(provenanceText('user'), 'changed by you');
  assert.equal(provenanceText('cluster_default'), 'cluster default');
  assert.equal(provenanceText('builtin'), 'built-in');
  assert.equal(provenanceText(null), 'not set');
});

test('the user\'s values become the body: api_model_name on top, health and inputs nested', () => {
  assert.deepEqual(requestBody({ recipe_id: 'smoke-test' }, { partition: 'debug', 'health.path': '/h', 'inputs.mode': 'ok',
    'inputs.startup_delay': 4, api_model_name: 'mine' }),
  { recipe_id: 'smoke-test', api_model_name: 'mine', values: { partition: 'debug', health: { path: '/h' }, inputs: { mode: 'ok', startup_delay: 4 } } });
  assert.deepEqual(requestBody({ hf: { repo_id: 'a/b', engine: 'llamacpp' } }, {}), { hf: { repo_id: 'a/b', engine: 'llamacpp' }, values: {} });
});

test('a number field sends a number when it reads as one, else the text for the server to refuse', () => {
  assert.equal(typed('number', '12'), 12);
  assert.equal(typed('number', '1x'), '1x');
  assert.equal(typed('text', '12'), '12');
  assert.equal(typed('switch', 1), true);
});

const fields = [
  { field: 'api_model_name', value: 'smoke-test' }, { field: 'partition', value: 'gpu' }, { field: 'qos', value: null },
  { field: 'time_limit', value: 30 }, { field: 'health.path', value: '/health' }, { field: 'health.interval', value: 2 },
  { field: 'inputs.mode', value: 'ok' },
];

test('the settings as YAML: form order, unset left out, user values over the preview, mappings for health and inputs', () => {
  assert.equal(toYaml(fields, { qos: 'long' }), [
    'api_model_name: "smoke-test"', 'partition: "gpu"', 'qos: "long"', 'time_limit: 30', 'health:', '  path: "/health"',
    '  interval: 2', 'inputs:', '  mode: "ok"', ''].join('\n'));
  // a value that would break YAML stays one scalar
  assert.match(toYaml([{ field: 'exclude', value: 'n1: # x\n' }]), /^exclude: "n1: # x\\n"\n$/);
});

test('after a YAML check, what the YAML changed is the user\'s; a user value the YAML dropped goes back to its default', () => {
  const settings = { api_model_name: { value: 'smoke-test' }, partition: { value: 'debug' }, qos: { value: null },
    time_limit: { value: 30 }, 'health.path': { value: '/health' }, 'health.interval': { value: 2 }, 'inputs.mode': { value: 'ok' } };
  assert.deepEqual(valuesFromYaml(settings, fields, { qos: 'long' }), { partition: 'debug' });
  // a value the user had set stays theirs even when equal to the preview's
  assert.deepEqual(valuesFromYaml(settings, fields, { time_limit: 30 }), { partition: 'debug', time_limit: 30 });
});

test('what picking a suggestion changed', () => {
  assert.deepEqual(changes(fields, fields.map((f) => (f.field === 'time_limit' ? { ...f, value: 60 } : f))),
    [{ field: 'time_limit', from: 30, to: 60 }]);
});

test('a partition option says whether a replica fits and how many fitting nodes are idle, or why it is unavailable', () => {
  assert.equal(partitionText({ available: true, can_run: true, fits: true, idle_fitting_nodes: 3, fitting_nodes: 4 }), 'fits · 3 of 4 fitting nodes idle');
  assert.equal(partitionText({ available: false, unavailable_reason: 'partition debug does not take account teaching' }),
    'partition debug does not take account teaching');
  assert.match(partitionText({ available: true, can_run: false, fits: false, errors: [{ message: 'no node has 9 GPUs' }], idle_fitting_nodes: 0, fitting_nodes: 0 }),
    /^cannot run this replica: no node has 9 GPUs · 0 of 0/);
  // a reason given both as an error and in words is said once
  assert.equal(partitionText({ available: true, can_run: false, errors: [{ message: 'too long' }], reasons: ['too long'], idle_fitting_nodes: 1, fitting_nodes: 1 }),
    'cannot run this replica: too long · 1 of 1 fitting nodes idle');
});

test('recipe inputs get typed widgets from their declaration', () => {
  const defs = { mode: { type: 'enum', values: ['ok', 'exit'] }, on: { type: 'boolean' }, n: { type: 'number', min: 0, max: 9 } };
  assert.equal(fieldMeta('inputs.mode', defs).kind, 'select');
  assert.equal(fieldMeta('inputs.on', defs).kind, 'switch');
  assert.deepEqual([fieldMeta('inputs.n', defs).min, fieldMeta('inputs.n', defs).max], [0, 9]);
  assert.equal(fieldMeta('memory_per_node').help, '0 is the whole node.');
});

test('editing a deployment: only the spec\'s values that differ from the recipe\'s are the user\'s', () => {
  const spec = { partition: 'debug', qos: null, time_limit: 30, health: { path: '/health', interval: 5 }, inputs: { mode: 'ok' }, model_name: 'x' };
  assert.deepEqual(specValues(spec, fields), { partition: 'debug', 'health.interval': 5 });
});

test('Review shows the slurmrestd request only when it is known, never null pieces', async () => {
  const { slurmRequestView } = await import('./launch-form.js');
  const none = slurmRequestView({ api_version: null, slurm_request: null });
  assert.equal(none.known, false);
  assert.match(none.text, /not known until Slurm is connected/);
  assert.ok(!/null/.test(JSON.stringify(none)), 'null pieces shown');
  const got = slurmRequestView({ api_version: 'v0.0.38', slurm_request: { script: '#!/bin/sh', job: { name: 'x' } } });
  assert.equal(got.known, true);
  assert.equal(got.line, 'POST /slurm/v0.0.38/job/submit (secrets masked)');
  assert.equal(got.body, JSON.stringify({ script: '#!/bin/sh', job: { name: 'x' } }, null, 2));
});

test('Review says which parts are placeholders until submit', async () => {
  const { placeholdersText } = await import('./launch-form.js');
  const t = placeholdersText({ model_id: 0, slot: 1, nonce: '0000000000000000', instance: '382bf636',
    note: 'the job name, comment and port are fixed per replica when the provisioner submits it' });
  assert.match(t, /^The job name, comment and port are fixed per replica when the provisioner submits it\./);
  assert.match(t, /model id 0 \(the model's id once launched\)/);
  assert.match(t, /slot 1/);
  assert.match(t, /nonce 0000000000000000/);
  assert.match(t, /first port of the port range/);
  assert.equal(placeholdersText(null), null);
  assert.match(placeholdersText({ model_id: 7, slot: 1, nonce: 'ab', note: 'n' }), /model id 7[,;]/);
});

test('a number or switch typed in the form stays a number or boolean in the YAML (as the server read it)', () => {
  const fields = [{ field: 'inputs.startup_delay', value: 5 }, { field: 'inputs.mistral_format', value: true },
    { field: 'inputs.model', value: '7' }];
  const text = toYaml(fields, { 'inputs.startup_delay': '5', 'inputs.mistral_format': 'true', 'inputs.model': '7' });
  assert.match(text, /^  startup_delay: 5$/m);
  assert.match(text, /^  mistral_format: true$/m);
  assert.match(text, /^  model: "7"$/m);
});

test('a setting shows the bounds and the empty value the server hands over, never its own', () => {
  const m = fieldMeta('rollover_margin', {}, {}, { min: 0, max: 10080, unit: 'minutes', empty: 7 });
  assert.deepEqual([m.min, m.max], [0, 10080]);
  assert.match(m.help, /Empty: 7 min\.$/);
  assert.doesNotMatch(fieldMeta('rollover_margin').help, /Empty/);
});

test('autoscale: its own group, the bounds and the empty value from the server\'s hint, nested in the body and the YAML', () => {
  const m = fieldMeta('autoscale.scale_down_after', {}, {}, { min: 0, max: 3600, default: 300, unit: 'seconds' });
  assert.equal(m.group, 'autoscale');
  assert.equal(m.kind, 'number');
  assert.deepEqual([m.min, m.max], [0, 3600]);
  assert.match(m.help, /Empty: 300 s\.$/);
  const body = requestBody({ recipe_id: 'r' }, { 'autoscale.min_replicas': 0, 'autoscale.max_replicas': 2 });
  assert.deepEqual(body.values, { autoscale: { min_replicas: 0, max_replicas: 2 } });
  const yaml = toYaml([{ field: 'replicas', value: null }, { field: 'autoscale.min_replicas', value: null },
    { field: 'autoscale.max_replicas', value: null }], { 'autoscale.min_replicas': 0, 'autoscale.max_replicas': 2 });
  assert.equal(yaml, 'autoscale:\n  min_replicas: 0\n  max_replicas: 2\n');
});
