// `npm run build`: dist/ as published.
//  1. tsc emits every module of src/ into dist/, each with its .d.ts (the declarations users get, and
//     the per-file modules the CLI, the bench and the tests' child processes load).
//  2. esbuild then overwrites the public entry points (dist/index.js, dist/adapters/kysely/index.js,
//     dist/pg-boss/index.js) with bundles of that same tsc output, their shared code in dist/chunks/:
//     a new process then reads a handful of files instead of ~100, which is most of what loading
//     pgfence costs. Packages (pg, kysely, pg-boss, @opentelemetry/api) stay external peers.
// Nothing in src/ outside the entry points imports an entry point (test/architecture.test.ts), so no
// process mixes a bundle with the per-file copy of the same module (two copies of every error class).
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';

const root = fileURLToPath(new URL('..', import.meta.url));
const dist = join(root, 'dist');
// The entry points: what package.json's "exports" name under dist/ (the bin, dist/cli/main.js, stays
// per-file: its commands load lazily, and `pgfence --help` reads a few small modules).
const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const entryPoints = Object.values(manifest.exports)
  .map((target) => (typeof target === 'string' ? target : target.default))
  .filter((target) => target.startsWith('./dist/') && target.endsWith('.js'))
  .map((target) => target.slice('./dist/'.length, -'.js'.length));

// Chunk names carry a hash: the ones of an earlier build would linger and ship.
rmSync(join(dist, 'chunks'), { recursive: true, force: true });
execFileSync(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.build.json'], { cwd: root, stdio: 'inherit' });

const result = await esbuild.build({
  absWorkingDir: root,
  entryPoints: Object.fromEntries(entryPoints.map((e) => [e, join(dist, `${e}.js`)])),
  outdir: dist,
  allowOverwrite: true, // each entry's bundle replaces tsc's file it was built from
  bundle: true,
  splitting: true,
  chunkNames: 'chunks/[name]-[hash]',
  format: 'esm',
  platform: 'node',
  target: 'node20',
  packages: 'external',
  // Whitespace and syntax only, names kept (stack traces still name the functions): about 30% fewer
  // bytes for every new process to read and compile.
  minifyWhitespace: true,
  minifySyntax: true,
  metafile: true,
  logLevel: 'warning',
});

// Checks of what bundling may change, on each bundle and chunk:
const problems = [];
const tscClasses = new Set();
for (const file of Object.keys(result.metafile.inputs)) {
  for (const [, name] of readFileSync(join(root, file), 'utf8').matchAll(/\bclass (\w+)/g)) tscClasses.add(name);
}
for (const output of Object.keys(result.metafile.outputs)) {
  const file = join(root, output);
  const text = readFileSync(file, 'utf8');
  // A module that finds files next to itself (new URL('../../migrations', import.meta.url)) now
  // resolves from the bundle or chunk it landed in: each such path must still reach the same file.
  if (text.includes('import.meta')) {
    for (const [, path] of text.matchAll(/new URL\(\s*["'`](\.\.?\/[^"'`]+)["'`]\s*,/g)) {
      if (!existsSync(join(dirname(file), path))) problems.push(`${output}: ${path} is not there`);
    }
  }
  // esbuild renames a top-level class whose name another module also uses; an error's name is its
  // class's (new.target.name), so a renamed class would change what users see.
  for (const [, name] of text.matchAll(/\bclass (\w+)/g)) {
    if (!tscClasses.has(name)) problems.push(`${output}: class ${name} was renamed`);
  }
}
if (problems.length > 0) {
  console.error(`build: the bundles differ from tsc's modules:\n  ${problems.join('\n  ')}`);
  process.exit(1);
}
