// What the Slurm card and sheet say about the connection, the JWT and the
// provisioner. The server measures; these only choose the words.
import { relative, duration, count } from './format.js';

/**
 * The JWT's expiry in words: {level: "ok"|"warn"|"expired"|"unknown", text}. warnBefore: seconds before
 * expiry from which it is a warning — the server's number (GET /settings/slurm `thresholds.token_warn_before`).
 */
export function jwtStatus(expiresAt, now, tokenSet = true, warnBefore = null) {
  if (!tokenSet) return { level: 'unknown', text: 'no JWT saved' };
  if (expiresAt == null) return { level: 'unknown', text: 'the JWT has no expiry (exp claim)' };
  const left = expiresAt - now;
  if (left <= 0) return { level: 'expired', text: `expired ${relative(expiresAt, now)}` };
  if (warnBefore != null && left < warnBefore) return { level: 'warn', text: `expires ${relative(expiresAt, now)} — renew it soon` };
  return { level: 'ok', text: `expires ${relative(expiresAt, now)}` };
}

const CODE_WORDS = {
  unreachable: 'slurmrestd could not be reached at this address (nothing answered, or the connection was refused).',
  timeout: 'slurmrestd did not answer in time.',
  auth: 'slurmrestd refused the credentials: check the user name and the JWT.',
  tls: 'The TLS connection failed: check the certificate (CA file) or the https URL.',
  bad_response: 'Something answered, but not like slurmrestd (wrong URL or port?).',
  not_configured: 'No slurmrestd URL or socket is saved or given.',
  unsupported: 'This slurmrestd speaks no API version obleth knows (the detail names those it knows).',
};

/** A test or connection error ({code, message}, docs/errors.md) in plain words, with the server's detail kept. */
export function errorWords(err) {
  if (!err) return null;
  let code = err.code || 'error';
  // libcurl says TLS problems as "unreachable" with an SSL message: name them for what they are
  if (code === 'unreachable' && /ssl|tls|certificate/i.test(err.message || '')) code = 'tls';
  return { code, text: CODE_WORDS[code] || 'The test failed.', detail: err.message || '' };
}

/**
 * The provisioner's check-in and its passes: {level: "ok"|"warn"|"error"|"unknown", text, error?}. staleAfter:
 * seconds without a check-in after which it is taken for stopped — the server's number
 * (GET /settings/slurm `thresholds.provisioner_stale`, the one the router's 503s use).
 */
export function provisionerStatus(p, now, staleAfter = null) {
  if (!p || p.checked_in_at == null) {
    return { level: 'unknown', text: 'The provisioner has not checked in yet.' };
  }
  const seen = `checked in ${relative(p.checked_in_at, now)}`;
  if (p.failed_passes > 0) {
    return { level: 'error', text: `Provisioner ${seen}; ${count('pass', p.failed_passes, 'passes')} failing in a row.`,
      error: p.last_error || null };
  }
  const stale = staleAfter != null && now - p.checked_in_at > staleAfter;
  return { level: stale ? 'warn' : 'ok', text: stale ? `Provisioner last ${seen} — is it running?` : `Provisioner ${seen}.` };
}

/** The provisioner lease when the server reports one ({holder, host, pid, expires_at}). */
export function leaseWords(lease, now) {
  if (!lease) return null;
  const who = [lease.holder, lease.host && `on ${lease.host}`, lease.pid != null && `pid ${lease.pid}`]
    .filter(Boolean).join(' ');
  return `${who || 'a provisioner'}; lease ${lease.expires_at != null ? `ends ${relative(lease.expires_at, now)}` : 'held'}`;
}

const TOKEN_SOURCES = { static: 'a saved JWT', key_file: 'signed here with the site key (renewed before expiry)',
  command: 'printed by a command (renewed before expiry)' };

/** Where the JWT comes from, when the server says. */
export function tokenSourceWords(src) {
  if (!src) return null;
  return TOKEN_SOURCES[src] || src;
}

export { duration };

/**
 * The policy files that do not load, as the card words them (the previous version of each stays in
 * use): obleth serve's own (GET /settings/slurm `serve_policy_errors`) and the provisioner's
 * (`provisioner.policy_error`). Each {who, where, message}.
 */
export function policyErrors(settings) {
  const out = [];
  const where = (e) => (e.file ? `${e.file}${e.line != null ? `:${e.line}` : ''}` : (e.policy || 'a policy file'));
  // Lua's own message starts with the file and line the card already shows beside it: said once
  const said = (e, w) => (e.message.startsWith(`${w}: `) ? e.message.slice(w.length + 2) : e.message);
  const add = (who, e) => { const w = where(e); out.push({ who, where: w, message: said(e, w) }); };
  for (const e of (settings && settings.serve_policy_errors) || []) add('obleth serve', e);
  const p = settings && settings.provisioner && settings.provisioner.policy_error;
  if (p && p.message) add('the provisioner', p);
  return out;
}
