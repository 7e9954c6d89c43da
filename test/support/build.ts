import { execFile } from 'node:child_process';
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';

/**
 * Child-process tests run the built package (dist/). `npm test` builds first; a bare `vitest run`
 * builds here, once, before any test file starts, if any source is newer than its output.
 */
export async function ensureBuilt(root: string): Promise<void> {
  if (!(await isStale(root))) return;
  const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
  await promisify(execFile)(process.execPath, [tsc, '-p', 'tsconfig.build.json'], { cwd: root });
}

async function isStale(root: string): Promise<boolean> {
  const sources = (await readdir(join(root, 'src'), { recursive: true })).filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'));
  for (const source of sources) {
    const built = await stat(join(root, 'dist', source.replace(/\.ts$/, '.js'))).catch(() => null);
    if (!built || built.mtimeMs < (await stat(join(root, 'src', source))).mtimeMs) return true;
  }
  return false;
}
