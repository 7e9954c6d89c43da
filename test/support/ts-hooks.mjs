// Module hooks for ts-loader.mjs: `./x.js` resolves to `./x.ts` when only that exists (the sources
// import with .js, as NodeNext wants), and .ts files load transpiled to ES modules. Transpiled files
// are cached by path, size and mtime (children start often), and TypeScript is loaded only on a miss.
import { createHash } from 'node:crypto';
import { mkdir, readFile, rename, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const cacheDir = join(tmpdir(), 'pgfence-ts-loader-cache');
let typescript = null;

export async function resolve(specifier, context, next) {
  try {
    return await next(specifier, context);
  } catch (err) {
    const relative = specifier.startsWith('.') || specifier.startsWith('file:');
    if (!relative || !specifier.endsWith('.js')) throw err;
    return next(`${specifier.slice(0, -3)}.ts`, context);
  }
}

export async function load(url, context, next) {
  if (!url.startsWith('file:') || !url.endsWith('.ts')) return next(url, context);
  const fileName = fileURLToPath(url);
  const { size, mtimeMs } = await stat(fileName);
  const cached = join(cacheDir, `${createHash('sha256').update(`${fileName}\0${size}\0${mtimeMs}`).digest('hex')}.js`);
  const hit = await readFile(cached, 'utf8').catch(() => null);
  if (hit !== null) return { format: 'module', source: hit, shortCircuit: true };
  typescript ??= (await import('typescript')).default;
  const { outputText } = typescript.transpileModule(await readFile(fileName, 'utf8'), {
    fileName,
    compilerOptions: { module: typescript.ModuleKind.ESNext, target: typescript.ScriptTarget.ES2022, inlineSourceMap: true, inlineSources: true },
  });
  await mkdir(cacheDir, { recursive: true });
  // Written whole under a unique name first: a child reading it meanwhile never sees half a file.
  const partial = `${cached}.${process.pid}.tmp`;
  await writeFile(partial, outputText);
  await rename(partial, cached);
  return { format: 'module', source: outputText, shortCircuit: true };
}
