// Bundles the dashboard into build/web/: index.html, assets/<name>-<hash>.{js,css,svg}.
// Usage: node web/build.mjs [outdir]   (default: <repo>/build/web)
// The page has no inline script or style (the server's CSP forbids them) and
// fetches nothing from outside the server: fonts are the system's.
const major = Number(process.versions.node.split('.')[0]);
if (major < 18) {
  console.error(`web: Node ${process.versions.node} is too old: the dashboard builds and tests with Node 18 or newer (20 is what it is tested with)`);
  process.exit(1);
}
const esbuild = await import('esbuild');
import { mkdir, rm, writeFile, readFile, readdir } from 'node:fs/promises';
import { gzipSync, constants as zlibConstants } from 'node:zlib';
import { createHash } from 'node:crypto';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const out = path.resolve(process.argv[2] || path.join(here, '..', 'build', 'web'));
const assets = path.join(out, 'assets');

await rm(out, { recursive: true, force: true });
await mkdir(assets, { recursive: true });

const result = await esbuild.build({
  entryPoints: [path.join(here, 'src', 'main.js'), path.join(here, 'src', 'style.css')],
  bundle: true,
  format: 'esm',
  target: ['chrome100', 'firefox100', 'safari15'],
  minify: true,
  sourcemap: false,
  legalComments: 'none',
  entryNames: '[name]-[hash]',
  outdir: assets,
  metafile: true,
  logLevel: 'warning',
});

const names = {};
for (const [file, meta] of Object.entries(result.metafile.outputs)) {
  if (!meta.entryPoint) continue;
  names[path.extname(file)] = path.basename(file);
}
if (!names['.js'] || !names['.css']) throw new Error('esbuild did not produce the js and css entries');

const icon = await readFile(path.join(here, 'src', 'favicon.svg'));
const iconName = `favicon-${createHash('sha256').update(icon).digest('hex').slice(0, 8)}.svg`;
await writeFile(path.join(assets, iconName), icon);

const html = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>obleth</title>
<link rel="icon" href="/assets/${iconName}" type="image/svg+xml">
<link rel="stylesheet" href="/assets/${names['.css']}">
<script type="module" src="/assets/${names['.js']}"></script>
</head>
<body>
<div id="app"><noscript>The obleth dashboard needs JavaScript.</noscript></div>
</body>
</html>
`;
await writeFile(path.join(out, 'index.html'), html);

// Each asset also gzipped at build time (<name>.gz beside it): obleth serve answers it with
// Content-Encoding: gzip to a browser that accepts it, and compresses nothing itself.
const sizes = [];
for (const f of await readdir(assets)) {
  const body = await readFile(path.join(assets, f));
  const gz = gzipSync(body, { level: zlibConstants.Z_BEST_COMPRESSION });
  if (gz.length < body.length) {
    await writeFile(path.join(assets, `${f}.gz`), gz);
    sizes.push(`${f} ${body.length} -> ${gz.length} B gzipped`);
  }
}
console.log(`web: ${path.relative(process.cwd(), out)}/index.html, assets/${names['.js']}, assets/${names['.css']}`);
console.log(`web: ${sizes.join('; ')}`);
