import { execFile } from 'node:child_process';
import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';

/**
 * Child-process tests run the built package (dist/). `npm test` builds first; a bare `vitest run`
 * builds here (`npm run build`'s script), once, before any test file starts, if any source is newer
 * than its output, or if dist/index.js is not the bundle (dist/ from a bare tsc run).
 */
export async function ensureBuilt(root: string): Promise<void> {
  if (!(await isStale(root))) return;
  await promisify(execFile)(process.execPath, [join(root, 'scripts', 'build.mjs')], { cwd: root });
}

async function isStale(root: string): Promise<boolean> {
  const entry = await readFile(join(root, 'dist', 'index.js'), 'utf8').catch(() => '');
  if (!entry.includes('./chunks/')) return true;
  const sources = (await readdir(join(root, 'src'), { recursive: true })).filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'));
  for (const source of sources) {
    const built = await stat(join(root, 'dist', source.replace(/\.ts$/, '.js'))).catch(() => null);
    if (!built || built.mtimeMs < (await stat(join(root, 'src', source))).mtimeMs) return true;
  }
  return false;
}
