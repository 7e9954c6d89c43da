import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const run = promisify(execFile);
const root = fileURLToPath(new URL('..', import.meta.url));
let work: string;
let files: string[];

/** The packed tarball, unpacked into a consumer project that depends on it like any user would. */
beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'pgfence-pack-'));
  const { stdout } = await run('npm', ['pack', '--json', '--pack-destination', work], { cwd: root });
  const packed = JSON.parse(stdout) as { filename: string; files: { path: string }[] }[];
  files = packed[0]!.files.map((f) => f.path);
  const consumer = join(work, 'consumer');
  await mkdir(join(consumer, 'node_modules', 'pgfence'), { recursive: true });
  await run('tar', ['-xzf', join(work, packed[0]!.filename), '-C', join(consumer, 'node_modules', 'pgfence'), '--strip-components=1']);
  // The consumer's other dependencies: the ones this repository has installed.
  for (const dep of ['pg', '@types/pg', 'kysely', 'pg-boss', '@types/node', 'murmurhash3js-revisited', 'pg-types', 'pg-protocol']) {
    const at = join(consumer, 'node_modules', dep);
    await mkdir(join(at, '..'), { recursive: true });
    await symlink(join(root, 'node_modules', dep), at).catch(() => {});
  }
  await writeFile(join(consumer, 'package.json'), JSON.stringify({ name: 'consumer', type: 'module', private: true }));
  await writeFile(
    join(consumer, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: { strict: true, module: 'NodeNext', moduleResolution: 'NodeNext', target: 'ES2022', noEmit: true, types: ['node'], skipLibCheck: false },
      files: ['consumer.ts'],
    }),
  );
  await writeFile(
    join(consumer, 'consumer.ts'),
    `import { createLocker, lockKey, xactLock, fencedUpdate, fencingColumnSql, migrate, LockTimeoutError, type LockHandle, type LeaseHandle, type Locker } from 'pgfence';
import { xactLock as kXactLock, fenced, pgfenceMigrations, addFencingColumn } from 'pgfence/kysely';
import { workWithLock } from 'pgfence/pg-boss';
const locker: Locker = createLocker({ connectionString: 'postgres://localhost/x' });
const key: bigint = lockKey('order:1', { namespace: 'app' });
async function use(): Promise<void> {
  const h: LockHandle = await locker.acquire('a', { timeoutMs: 10, fencing: true });
  const t: bigint | null = h.token;
  const l: LeaseHandle = await locker.lease('b', { ttlMs: 1000 });
  const e: bigint = l.token;
  void [t, e, key, xactLock, fencedUpdate, fencingColumnSql('x'), migrate, kXactLock, fenced, pgfenceMigrations, addFencingColumn, workWithLock];
  if (h instanceof LockTimeoutError) throw h;
}
void use;
`,
  );
}, 120_000);

afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

describe('the packed package', () => {
  it('contains the build, the migrations and the SQL definitions, and nothing stray', () => {
    expect(files).toContain('dist/index.js');
    expect(files).toContain('dist/index.d.ts');
    expect(files).toContain('dist/kysely/index.d.ts');
    expect(files).toContain('dist/pg-boss/index.d.ts');
    expect(files).toContain('dist/cli/main.js');
    expect(files).toContain('migrations/0001_schema.sql');
    expect(files).toContain('sql/fencing.sql');
    expect(files).toContain('package.json');
    const allowed = /^(dist\/.+\.(js|d\.ts)|migrations\/(\d{4}_\w+\.sql|README\.md)|sql\/([\w-]+\.sql|kysely-definition-migrations\.txt|README\.md)|package\.json|README\.md)$/;
    expect(files.filter((f) => !allowed.test(f))).toEqual([]);
    expect(files.some((f) => f.startsWith('src/') || f.startsWith('test/') || f.startsWith('bench/'))).toBe(false);
  });

  it('type-checks a TypeScript consumer of every subpath', async () => {
    const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
    const result = await run(process.execPath, [tsc, '-p', join(work, 'consumer', 'tsconfig.json')]).catch((e: { stdout: string }) => e);
    expect('stdout' in result ? result.stdout : '').toBe('');
  }, 60_000);

  it('loads at run time through its exports map', async () => {
    const { stdout } = await run(
      process.execPath,
      ['--input-type=module', '-e', "const m = await import('pgfence'); const k = await import('pgfence/kysely'); console.log(typeof m.createLocker, typeof k.xactLock, String(m.lockKey('order:123')));"],
      { cwd: join(work, 'consumer') },
    );
    expect(stdout.trim()).toBe('function function -2046217617591970219');
  });
});
