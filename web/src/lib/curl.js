// How a client calls a model through obleth: the base URL and a curl line.

/** Quote a string for a POSIX shell (single quotes; embedded ' closed and escaped). */
export function shq(s) {
  return `'${String(s).replace(/'/g, `'\\''`)}'`;
}

/** The OpenAI base URL clients use: the server's origin + /v1. */
export function baseUrl(origin) {
  return `${origin.replace(/\/+$/, '')}/v1`;
}

/** A curl line for one chat completion against model `name`; keyless leaves out the key header. */
export function curlLine(origin, name, keyless = false) {
  const body = JSON.stringify({ model: name, messages: [{ role: 'user', content: 'Say hello' }] });
  const parts = ['curl', '-s', shq(`${baseUrl(origin)}/chat/completions`)];
  if (!keyless) parts.push('-H', '"Authorization: Bearer $OBLETH_API_KEY"');
  parts.push('-H', shq('Content-Type: application/json'), '-d', shq(body));
  return parts.join(' ');
}
