import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fromSettings, toBody, toTestBody, MASK } from './settings-form.js';
import { shq, curlLine, baseUrl } from './curl.js';
import { match, safeNext } from './routes.js';

const saved = {
  enabled: true, url: 'http://slurm:6820', socket: null, user: 'obleth', token: MASK, token_set: true,
  verify: true, ca_file: null, api_version: 'auto', timeout: 10,
  defaults: { model_cache_dir: '/scratch/models', image_dir: null, log_dir: '/logs', modules: ['cuda/12', 'gcc'],
    partition: 'gpu', account: 'research', qos: null, hf_token: null, hf_token_set: false, hf_token_path: null,
    port_range: [20000, 20999], environment: { HF_HOME: '/scratch/hf', A: 'x=y' } },
};

test('saving the sheet unchanged sends the secrets as the mask, so the server keeps them', () => {
  const { body } = toBody(fromSettings(saved));
  assert.equal(body.token, MASK);
  assert.equal(body.defaults.hf_token, MASK);
  assert.equal(body.url, 'http://slurm:6820');
  assert.equal(body.socket, null);
  assert.deepEqual(body.defaults.modules, ['cuda/12', 'gcc']);
  assert.deepEqual(body.defaults.port_range, [20000, 20999]);
  assert.deepEqual(body.defaults.environment, { HF_HOME: '/scratch/hf', A: 'x=y' });
  assert.equal(body.defaults.image_dir, null);
});

test('a typed secret is sent as typed; "clear" sends null; an empty field keeps it', () => {
  const f = fromSettings(saved);
  f.token = { value: 'eyJ.new', clear: false, set: true };
  f.defaults.hf_token = { value: '', clear: true, set: true };
  const { body } = toBody(f);
  assert.equal(body.token, 'eyJ.new');
  assert.equal(body.defaults.hf_token, null);
});

test('an environment line without = and half a port range are refused at their field', () => {
  const f = fromSettings(saved);
  f.defaults.environment = 'OK=1\nbroken';
  f.defaults.port_to = '';
  const { errors } = toBody(f);
  assert.deepEqual(errors.map((e) => e.field), ['defaults.environment', 'defaults.port_range']);
  assert.match(errors[0].message, /line 2/);
});

test('the connection test sends what is typed, and the token only when it changed', () => {
  const f = fromSettings(saved);
  assert.deepEqual(toTestBody(f), { url: 'http://slurm:6820', user: 'obleth', verify: true, api_version: 'auto', token_source: 'static' });
  f.token = { value: 'jwt', clear: false, set: true };
  assert.equal(toTestBody(f).token, 'jwt');
});

test('the curl line quotes for the shell and leaves the key out when keyless', () => {
  assert.equal(shq("it's"), `'it'\\''s'`);
  assert.equal(baseUrl('http://h:8080/'), 'http://h:8080/v1');
  const line = curlLine('http://h:8080', 'smoke');
  assert.equal(line, `curl -s 'http://h:8080/v1/chat/completions' -H "Authorization: Bearer $OBLETH_API_KEY" ` +
    `-H 'Content-Type: application/json' -d '{"model":"smoke","messages":[{"role":"user","content":"Say hello"}]}'`);
  assert.ok(!curlLine('http://h', "a'b", true).includes('Authorization'));
  assert.ok(curlLine('http://h', "a'b", true).includes(`"model":"a'\\''b"`));
});

test('routes match the paths the server answers with the app', () => {
  assert.deepEqual(match('/'), { name: 'deployments', params: {} });
  assert.deepEqual(match('/deployments'), { name: 'deployments', params: {} });
  assert.deepEqual(match('/deployments/new'), { name: 'new-deployment', params: {} });
  assert.deepEqual(match('/deployments/12'), { name: 'deployment', params: { modelId: '12' } });
  assert.deepEqual(match('/keys'), { name: 'keys', params: {} });
  assert.deepEqual(match('/cluster'), { name: 'cluster', params: {} });
  assert.deepEqual(match('/tokens'), { name: 'tokens', params: {} });
  assert.deepEqual(match('/audit'), { name: 'audit', params: {} });
  assert.deepEqual(match('/docs/replicas-and-failures'), { name: 'docs', params: { page: 'replicas-and-failures' } });
  assert.equal(match('/docs/../x').name, 'not-found');
  assert.equal(match('/signin').name, 'signin');
  assert.equal(match('/nope/x').name, 'not-found');
});

test('after sign-in the page returns only to a path on this site', () => {
  assert.equal(safeNext('/deployments/3'), '/deployments/3');
  assert.equal(safeNext('//evil.example/'), '/deployments');
  assert.equal(safeNext('https://evil.example/'), '/deployments');
  assert.equal(safeNext('/signin'), '/deployments');
  assert.equal(safeNext(null), '/deployments');
});

test('a first setup starts enabled; a saved connection keeps what was saved', () => {
  assert.equal(fromSettings({ enabled: false, url: null, socket: null, defaults: {} }).enabled, true);
  assert.equal(fromSettings({ ...saved, enabled: false }).enabled, false);
  assert.equal(fromSettings(saved).enabled, true);
});

// A whole GET /settings/slurm answer: PUT replaces the document, so a Save must send back every setting
// the sheet got, shown or not (and keys a newer server adds), unchanged unless the user changed them.
const fullGet = {
  ...saved,
  token_source: 'key_file', token_key_file: '/etc/obleth/jwt_hs256.key', token_command: null, token_lifespan: 3600,
  token_expires_at: 1900000000, token_renewed_at: 1899990000, token_warning: null, updated_at: 1899000000,
  provisioner: { checked_in_at: 1899999000, failed_passes: 0, last_error: null, lease: null, token: null },
  a_future_setting: { kept: ['as', 'is'] },
  defaults: { ...saved.defaults, user_groups: ['hpc', 'obleth-staff'], enforce_part_limits: 'ALL',
    a_future_default: 42 },
};

test('a Save sends back every setting it got, shown or not, unchanged (a GET answer round-trips)', () => {
  const { body } = toBody(fromSettings(fullGet));
  const expected = structuredClone(fullGet);
  expected.defaults.hf_token = MASK; // a secret left alone goes back as the mask: the server keeps it
  assert.deepEqual(body, expected);
});

test('the JWT source, key file, command and lifespan, user_groups and EnforcePartLimits are edited by the form', () => {
  const f = fromSettings(fullGet);
  assert.equal(f.token_source, 'key_file');
  assert.equal(f.token_key_file, '/etc/obleth/jwt_hs256.key');
  assert.equal(f.token_lifespan, '3600');
  assert.equal(f.defaults.user_groups, 'hpc\nobleth-staff');
  assert.equal(f.defaults.enforce_part_limits, 'ALL');
  f.token_source = 'command';
  f.token_command = ' ssh login1 scontrol token lifespan=3600 ';
  f.token_lifespan = '';
  f.defaults.user_groups = ' hpc \n\n research ';
  f.defaults.enforce_part_limits = '';
  const { body } = toBody(f);
  assert.equal(body.token_source, 'command');
  assert.equal(body.token_command, 'ssh login1 scontrol token lifespan=3600');
  assert.equal(body.token_key_file, '/etc/obleth/jwt_hs256.key', 'the key file stays saved for a switch back');
  assert.equal(body.token_lifespan, null, 'empty: the default lifespan');
  assert.deepEqual(body.defaults.user_groups, ['hpc', 'research']);
  assert.equal(body.defaults.enforce_part_limits, null, 'empty: unknown');
  f.defaults.user_groups = '';
  f.token_lifespan = 'soon';
  const r = toBody(f);
  assert.deepEqual(r.errors.map((e) => e.field), ['token_lifespan']);
  f.token_lifespan = '600';
  assert.equal(toBody(f).body.defaults.user_groups, null, 'no groups typed: the host\'s group database');
  assert.equal(toBody(f).body.token_lifespan, 600);
});

test('a first setup (nothing saved) starts with a static JWT and unknown groups', () => {
  const f = fromSettings({ enabled: false, url: null, socket: null, defaults: {} });
  assert.equal(f.token_source, 'static');
  const { body } = toBody(f);
  assert.equal(body.token_source, 'static');
  assert.equal(body.defaults.user_groups, null);
  assert.equal(body.defaults.enforce_part_limits, null);
});

test('the connection test sends the JWT source as typed', () => {
  const f = fromSettings(fullGet);
  const b = toTestBody(f);
  assert.equal(b.token_source, 'key_file');
  assert.equal(b.token_key_file, '/etc/obleth/jwt_hs256.key');
  assert.equal(b.token_lifespan, 3600);
  assert.ok(!('token_command' in b));
});

test('the Hugging Face token file is a plain path setting: shown, edited, sent back (blank: none)', () => {
  const f = fromSettings({ ...saved, defaults: { ...saved.defaults, hf_token_path: '/home/obleth/.hf-token' } });
  assert.equal(f.defaults.hf_token_path, '/home/obleth/.hf-token');
  f.defaults.hf_token_path = ' /scratch/svc/token ';
  assert.equal(toBody(f).body.defaults.hf_token_path, '/scratch/svc/token');
  f.defaults.hf_token_path = '';
  assert.equal(toBody(f).body.defaults.hf_token_path, null);
});
