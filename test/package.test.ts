import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { cp, mkdir, mkdtemp, readFile, realpath, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from './support/db.js';
import { markdownBlocks } from './support/doc-blocks.js';
import { installedAtLeast, installedVersion } from './support/versions.js';

const run = promisify(execFile);
const root = fileURLToPath(new URL('..', import.meta.url));
let work: string;
let tarball: string;
let files: { path: string }[];

/**
 * The Kysely versions a consumer's types are checked against: the ones the two CI legs install
 * (package-lock.json: 0.28; ci/node24/package-lock.json: 0.29), each installed into the test's
 * temporary folder from the npm registry (or npm's cache).
 */
async function lockedKyselyVersions(): Promise<string[]> {
  const versions = [];
  for (const lock of ['package-lock.json', 'ci/node24/package-lock.json']) {
    const parsed = JSON.parse(await readFile(join(root, lock), 'utf8')) as { packages: Record<string, { version: string }> };
    versions.push(parsed.packages['node_modules/kysely']!.version);
  }
  return versions;
}
const kyselyVersions = await lockedKyselyVersions();
const installedKysely = installedVersion('kysely').join('.');
const resolutions = ['node16', 'nodenext', 'bundler'] as const;

/** What a fresh clone lacks: installed packages, build output, caches (see .gitignore). */
function notInClone(path: string): boolean {
  const [top] = path.split(sep);
  return path.split(sep).includes('node_modules') || ['dist', '.git', '.ci-cache', '.scratch', '.pgfence-test'].includes(top!) || path.endsWith('.tsbuildinfo');
}

/** The packed tarball, unpacked into consumer projects that depend on it like any user would. */
beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'pgfence-pack-'));
  // Pack from a clean tree (no dist/, no build output), as `npm publish` from a fresh clone would: prepack builds.
  const tree = join(work, 'tree');
  await cp(root, tree, { recursive: true, filter: (from) => !notInClone(relative(root, from)) });
  await symlink(await realpath(join(root, 'node_modules')), join(tree, 'node_modules'));
  const [{ stdout }] = await Promise.all([
    run('npm', ['pack', '--json', '--pack-destination', work], { cwd: tree }),
    ...kyselyVersions.map((v) =>
      run('npm', ['install', '--prefix', join(work, `kysely-${v}`), '--no-save', '--no-package-lock', '--prefer-offline', '--no-audit', '--no-fund', `kysely@${v}`]),
    ),
  ]);
  const packed = JSON.parse(stdout.slice(stdout.indexOf('['))) as { filename: string; files: { path: string }[] }[];
  tarball = join(work, packed[0]!.filename);
  files = packed[0]!.files;
  await Promise.all(kyselyVersions.map((v) => makeConsumer(v)));
}, 180_000);

afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

/** A consumer project using kysely `version` (and the pg-boss this run has installed). */
async function makeConsumer(version: string): Promise<void> {
  const consumer = join(work, `consumer-${version}`);
  await mkdir(join(consumer, 'node_modules', 'pgfence'), { recursive: true });
  await run('tar', ['-xzf', tarball, '-C', join(consumer, 'node_modules', 'pgfence'), '--strip-components=1']);
  await symlink(join(work, `kysely-${version}`, 'node_modules', 'kysely'), join(consumer, 'node_modules', 'kysely'));
  // The consumer's other dependencies: the ones this repository has installed.
  for (const dep of ['pg', '@types/pg', 'pg-boss', '@types/node', 'murmurhash3js-revisited', 'pg-types', 'pg-protocol']) {
    const at = join(consumer, 'node_modules', dep);
    await mkdir(join(at, '..'), { recursive: true });
    await symlink(await realpath(join(root, 'node_modules', dep)), at);
  }
  await writeFile(join(consumer, 'package.json'), JSON.stringify({ name: 'consumer', type: 'module', private: true }));
  for (const resolution of resolutions) {
    const module = resolution === 'bundler' ? 'ESNext' : resolution === 'node16' ? 'Node16' : 'NodeNext';
    await writeFile(
      join(consumer, `tsconfig.${resolution}.json`),
      JSON.stringify({
        compilerOptions: { strict: true, module, moduleResolution: resolution, target: 'ES2022', noEmit: true, types: ['node'], skipLibCheck: false },
        files: ['consumer.ts'],
      }),
    );
  }
  // A real PgBoss passed to workWithLock. pg-boss's own declarations are left unchecked here: pg-boss
  // 12.38's do not compile (they import a ResolvedConstructorOptions that their types.d.ts lacks).
  await writeFile(
    join(consumer, 'tsconfig.boss.json'),
    JSON.stringify({
      compilerOptions: { strict: true, module: 'NodeNext', moduleResolution: 'nodenext', target: 'ES2022', noEmit: true, types: ['node'], skipLibCheck: true },
      files: ['boss.ts'],
    }),
  );
  const bossImport = installedAtLeast('pg-boss', 12) ? "import { PgBoss } from 'pg-boss';" : "import PgBoss from 'pg-boss';";
  await writeFile(
    join(consumer, 'boss.ts'),
    `import { createLocker } from 'pgfence';
import { workWithLock } from 'pgfence/pg-boss';
${bossImport}
const boss = new PgBoss('postgres://localhost/x');
const locker = createLocker({ connectionString: 'postgres://localhost/x' });
await workWithLock<{ orderId: number }>(boss, locker, 'orders', { key: (job) => \`order:\${job.data.orderId}\`, fencing: true }, async (job, lock) => {
  job.signal.throwIfAborted();
  return { orderId: job.data.orderId, token: lock.token satisfies bigint };
});
await workWithLock(boss, locker, 'orders', { key: (job) => job.id, workOptions: { batchSize: 5 } }, async (_job, lock) => lock.token satisfies bigint | null);
`,
  );
  const [, minor] = version.split('.').map(Number);
  const migratorFrom = minor! >= 29 ? 'kysely/migration' : 'kysely';
  await writeFile(
    join(consumer, 'consumer.ts'),
    `import pg from 'pg';
import {
  createLocker, lockKey, xactLock, tryXactLock, fencedUpdate, fencingColumnSql, migrate, LockTimeoutError, PgfenceError,
  type LockHandle, type LeaseHandle, type Locker, type PgfenceErrorCode, type LockLostReason, type DemotionReason,
} from 'pgfence';
import { xactLock as kXactLock, fenced, fencedClaim as kFencedClaim, fencedUpdate as kFencedUpdate, pgfenceMigrations, addFencingColumn } from 'pgfence/kysely';
import { workWithLock, type BossLike, type JobStopReason } from 'pgfence/pg-boss';
import { Kysely, PostgresDialect } from 'kysely';
import { Migrator } from '${migratorFrom}';

interface Database {
  orders: { id: number; status: string; fencing_token: string | null };
}
const locker: Locker = createLocker({ connectionString: 'postgres://localhost/x' });
const key: bigint = lockKey('order:1', { namespace: 'app' });
const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool: new pg.Pool() }) });
// pgfence's provider is a Kysely MigrationProvider, with no cast.
const migrator = new Migrator({ db, provider: pgfenceMigrations(), migrationTableName: 'pgfence_kysely_migration' });
declare const boss: BossLike; // a real PgBoss: boss.ts

async function use(client: pg.PoolClient): Promise<void> {
  // fencing: true types the token as a bigint, with no '!'; without it, bigint | null.
  const h = await locker.acquire('a', { timeoutMs: 10, fencing: true });
  const t: bigint = h.token;
  const plain: LockHandle = await locker.acquire('a');
  // @ts-expect-error: a lock taken without fencing may have no token
  const noToken: bigint = plain.token;
  const tried = await locker.tryAcquire('a', { fencing: true });
  const tt: bigint | undefined = tried?.token;
  await locker.withLock('a', async (lock) => lock.token satisfies bigint, { fencing: true });
  await locker.tryWithLock('a', async (lock) => lock.token satisfies bigint, { fencing: true });
  const x: bigint = (await xactLock(client, 'x', { fencing: true })).token;
  const xt: bigint | undefined = (await tryXactLock(client, 'x', { fencing: true }))?.token;
  const l: LeaseHandle<{ node: string }> = await locker.lease('b', { ttlMs: 1000, data: { node: 'n1' } });
  const e: bigint = l.token;
  const node: string = l.data.node;
  await db.transaction().execute(async (trx) => {
    const lock = await kXactLock(trx, 'order:1', { fencing: true });
    const guarded = await fenced(trx.updateTable('orders').set({ status: 'paid' }).where('id', '=', 1), lock.token).execute();
    const why: 'stale' | 'missing' | undefined = guarded.reason;
    // Kysely helpers typed from the database type: rows as selected, the fencing column a bigint.
    const claim = await kFencedClaim(trx, { table: 'orders', where: { id: 1 }, token: lock.token });
    const claimedToken: bigint | undefined = claim.rows[0]?.fencing_token;
    const status: string | undefined = claim.rows[0]?.status;
    // @ts-expect-error: not a table of the database
    await kFencedUpdate(trx, { table: 'order', set: { status: 'paid' }, where: { id: 1 }, token: lock.token });
    // @ts-expect-error: not a column of orders
    await kFencedUpdate(trx, { table: 'orders', set: { state: 'paid' }, where: { id: 1 }, token: lock.token });
    void [why, claimedToken, status];
  });
  await workWithLock<{ orderId: number }>(boss, locker, 'orders', { key: (job) => \`order:\${job.data.orderId}\`, fencing: true }, async (job, lock) => {
    job.signal.throwIfAborted();
    const reason = job.signal.reason as JobStopReason;
    return { orderId: job.data.orderId, token: lock.token satisfies bigint, stopped: reason.code };
  });
  // Typed events and reasons.
  locker.on('lost', (ev) => {
    const why: LockLostReason = ev.reason;
    const token: bigint | null = ev.token;
    void [why, token];
  });
  // @ts-expect-error: not an event of a locker
  locker.on('lsot', () => {});
  locker.leader('l').on('demoted', (ev) => {
    const why: DemotionReason = ev.reason;
    void why;
  });
  try {
    await migrator.migrateToLatest();
  } catch (err) {
    if (err instanceof PgfenceError) {
      const code: PgfenceErrorCode = err.code;
      // @ts-expect-error: not a pgfence error code
      const wrong: typeof code = 'PGFENCE_NO_SUCH_CODE';
      void wrong;
    }
    if (err instanceof LockTimeoutError) err.code satisfies 'PGFENCE_LOCK_TIMEOUT';
  }
  void [t, noToken, tt, x, xt, e, node, key, fencedUpdate, fencingColumnSql('x'), migrate, addFencingColumn];
}
void use;
`,
  );
}

describe('the packed package', () => {
  it('contains the build, the migrations, the SQL definitions, the bin and the licence, and nothing stray', async () => {
    const paths = files.map((f) => f.path);
    for (const path of ['dist/index.js', 'dist/index.d.ts', 'dist/adapters/kysely/index.d.ts', 'dist/pg-boss/index.d.ts', 'dist/cli/main.js']) {
      expect(paths).toContain(path);
    }
    expect(paths).toContain('migrations/0001_schema.sql');
    expect(paths).toContain('sql/fencing.sql');
    expect(paths).toContain('sql/kysely-definition-migrations.txt');
    expect(paths).toContain('package.json');
    expect(paths).toContain('LICENSE');
    expect(paths).toContain('README.md');
    const allowed = /^(dist\/.+\.(js|d\.ts)|migrations\/(\d{4}_\w+\.sql|README\.md)|sql\/([\w-]+\.sql|kysely-definition-migrations\.txt|README\.md)|package\.json|README\.md|LICENSE)$/;
    expect(paths.filter((f) => !allowed.test(f))).toEqual([]);
    expect(paths.some((f) => f.startsWith('src/') || f.startsWith('test/') || f.startsWith('bench/') || f.startsWith('ci/'))).toBe(false);
    // Every module that a packed module imports is packed too (the bundles' chunks in dist/chunks/).
    const installed = join(work, `consumer-${kyselyVersions[0]}`, 'node_modules', 'pgfence');
    const missing: string[] = [];
    for (const path of paths.filter((f) => f.endsWith('.js'))) {
      const text = await readFile(join(installed, path), 'utf8');
      for (const [, spec] of text.matchAll(/(?:\bfrom\s*|\bimport\s*\(?\s*)["'](\.{1,2}\/[^"']+)["']/g)) {
        const target = join(path, '..', spec!).split(sep).join('/');
        if (!paths.includes(target)) missing.push(`${path} -> ${spec}`);
      }
    }
    expect(missing).toEqual([]);

    // The bin: what package.json names is in the tarball and starts with a shebang (npm makes it executable on install).
    const manifest = JSON.parse(await readFile(join(work, `consumer-${kyselyVersions[0]}`, 'node_modules', 'pgfence', 'package.json'), 'utf8')) as {
      bin: Record<string, string>;
      repository?: unknown;
      license?: string;
      keywords?: string[];
      homepage?: string;
    };
    const bin = manifest.bin.pgfence!.replace(/^\.\//, '');
    expect(paths).toContain(bin);
    expect(await readFile(join(work, `consumer-${kyselyVersions[0]}`, 'node_modules', 'pgfence', bin), 'utf8')).toMatch(/^#!\/usr\/bin\/env node\n/);
    expect(manifest).toMatchObject({ license: 'MIT', repository: expect.anything(), homepage: expect.any(String), keywords: expect.arrayContaining(['postgresql']) });
  });

  it('ships declarations without internal members', async () => {
    const dir = join(work, `consumer-${kyselyVersions[0]}`, 'node_modules', 'pgfence');
    const declarations = files.map((f) => f.path).filter((f) => f.endsWith('.d.ts'));
    expect(declarations.length).toBeGreaterThan(10);
    for (const path of declarations) expect(await readFile(join(dir, path), 'utf8'), path).not.toContain('@internal');
  });

  // Every resolution with the Kysely this run installed; the other Kysely with nodenext (each check takes seconds).
  const checks = kyselyVersions.flatMap((version) =>
    version === installedKysely ? resolutions.map((resolution) => [version, resolution] as const) : [[version, 'nodenext'] as const],
  );
  it.each(checks)('type-checks a TypeScript consumer of every subpath (kysely %s, moduleResolution %s, skipLibCheck false)', async (version, resolution) => {
    const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
    const result = await run(process.execPath, [tsc, '-p', join(work, `consumer-${version}`, `tsconfig.${resolution}.json`)]).catch((e: { stdout: string }) => e);
    expect('stdout' in result ? result.stdout : '').toBe('');
  }, 60_000);

  it(`lets workWithLock take a real PgBoss (pg-boss ${installedVersion('pg-boss').join('.')})`, async () => {
    const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
    const result = await run(process.execPath, [tsc, '-p', join(work, `consumer-${installedKysely}`, 'tsconfig.boss.json')]).catch((e: { stdout: string }) => e);
    expect('stdout' in result ? result.stdout : '').toBe('');
  }, 60_000);

  it('loads at run time through its exports map', async () => {
    const { stdout } = await run(
      process.execPath,
      ['--input-type=module', '-e', "const m = await import('pgfence'); const k = await import('pgfence/kysely'); console.log(typeof m.createLocker, typeof k.xactLock, String(m.lockKey('order:123')));"],
      { cwd: join(work, `consumer-${kyselyVersions[0]}`) },
    );
    expect(stdout.trim()).toBe('function function -2046217617591970219');
  });

  it('works as installed: migrate(), the pgfence/kysely migrations, a fenced lock, a busy tryAcquire, one error class across entry points', async () => {
    // The entry points are bundles sharing chunks (scripts/build.mjs): run what a user gets, from the
    // unpacked tarball, against fresh databases.
    const [plain, viaKysely] = await Promise.all([useTestDatabase('installed'), useTestDatabase('installed_kysely')]);
    const consumer = join(work, `consumer-${installedKysely}`);
    await writeFile(
      join(consumer, 'installed.mjs'),
      `import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { createLocker, migrate, PgfenceError } from 'pgfence';
import { pgfenceMigrations, xactLock } from 'pgfence/kysely';
import { workWithLock } from 'pgfence/pg-boss';
const [url, kyselyUrl] = process.argv.slice(2);
const out = {};
out.migrate = (await migrate({ connectionString: url })).applied;
// Kysely moved its Migrator to kysely/migration in 0.29.
const { Migrator } = (await import('kysely')).Migrator ? await import('kysely') : await import('kysely/migration');
const db = new Kysely({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: kyselyUrl }) }) });
const { error, results } = await new Migrator({ db, provider: pgfenceMigrations(), migrationTableName: 'pgfence_kysely_migration' }).migrateToLatest();
if (error) throw error;
out.kysely = results.map((r) => r.status);
await db.destroy();
const [a, b] = [createLocker({ connectionString: url }), createLocker({ connectionString: url })];
const lock = await a.acquire('installed:lock', { fencing: true });
out.token = typeof lock.token;
out.busy = await b.tryAcquire('installed:lock');
await lock.release();
out.free = await b.tryWithLock('installed:lock', async () => 'granted');
await Promise.all([a.close(), b.close()]);
// pgfence/kysely throws the class that pgfence exports: the bundles share one copy of it.
out.sameErrors = await xactLock(null, 'x').catch((err) => err instanceof PgfenceError && err.name);
out.workWithLock = typeof workWithLock;
console.log(JSON.stringify(out));
`,
    );
    const { stdout } = await run(process.execPath, ['installed.mjs', plain.url, viaKysely.url], { cwd: consumer, timeout: 60_000 });
    const out = JSON.parse(stdout) as { migrate: string[]; kysely: string[]; token: string; busy: unknown; free: unknown; sameErrors: unknown; workWithLock: string };
    expect(out.migrate).toContain('migrations/0001_schema.sql');
    expect(out.migrate).toContain('sql/fencing.sql');
    expect(out.kysely.length).toBeGreaterThan(0);
    expect(new Set(out.kysely)).toEqual(new Set(['Success']));
    expect(out).toMatchObject({ token: 'bigint', busy: null, free: { acquired: true, value: 'granted' }, sameErrors: 'InvalidArgumentError', workWithLock: 'function' });
  }, 120_000);

  it('works with the oldest pg its peer range allows: grants, busy tries, batches, blocking waits, fencing', async () => {
    // package.json promises pg ^8.11.0: node-postgres's internals that pgfence's lock statements drive differ across 8.x.
    const oldest = (JSON.parse(await readFile(join(root, 'package.json'), 'utf8')) as { peerDependencies: Record<string, string> }).peerDependencies.pg!.replace(/^\^/, '');
    const deps = join(work, `pg-${oldest}`);
    await run('npm', ['install', '--prefix', deps, '--no-save', '--no-package-lock', '--prefer-offline', '--no-audit', '--no-fund', `pg@${oldest}`], { timeout: 180_000 });
    const app = join(work, 'oldest-pg');
    await mkdir(join(app, 'node_modules', 'pgfence'), { recursive: true });
    await run('tar', ['-xzf', tarball, '-C', join(app, 'node_modules', 'pgfence'), '--strip-components=1']);
    await symlink(join(deps, 'node_modules', 'pg'), join(app, 'node_modules', 'pg'));
    await writeFile(join(app, 'package.json'), JSON.stringify({ name: 'oldest-pg', type: 'module', private: true }));
    await writeFile(
      join(app, 'oldest.mjs'),
      `import pg from 'pg';
import { createLocker, migrate } from 'pgfence';
const url = process.argv[2];
await migrate({ connectionString: url });
const [a, b] = [createLocker({ connectionString: url }), createLocker({ connectionString: url })];
const out = { pg: JSON.parse((await import('node:fs')).readFileSync(new URL(import.meta.resolve('pg/package.json')), 'utf8')).version };
const held = await a.acquire('oldest:x', { fencing: true });
out.token = typeof held.token;
out.busy = await b.tryAcquire('oldest:x');
const waiting = b.acquire('oldest:x', { timeoutMs: 10000 });
while (b.stats().waiting === 0) await new Promise((r) => setImmediate(r));
await held.release();
const granted = await waiting;
const many = await Promise.all(Array.from({ length: 30 }, (_, i) => a.acquire('oldest:' + i)));
out.batch = (await Promise.all(many.map((h) => h.release()))).every(Boolean);
out.released = await granted.release();
await Promise.all([a.close(), b.close()]);
console.log(JSON.stringify(out));
`,
    );
    const { url } = await useTestDatabase('oldest_pg');
    const { stdout } = await run(process.execPath, ['oldest.mjs', url], { cwd: app, timeout: 60_000 });
    expect(JSON.parse(stdout)).toEqual({ pg: oldest, token: 'bigint', busy: null, batch: true, released: true });
  }, 240_000);

  it('a fresh project (npm init -y && npm install <tarball> pg) runs the README Quick start as written', async () => {
    const app = join(work, 'app');
    await mkdir(app);
    await run('npm', ['init', '-y'], { cwd: app });
    // pg at the version this repository installed: from npm's cache when it has it, else the registry.
    const pgVersion = installedVersion('pg').join('.');
    await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', tarball, `pg@${pgVersion}`], { cwd: app, timeout: 180_000 });
    const quickStart = markdownBlocks(root, 'README.md').find((b) => b.lang === 'js' && b.flags.includes('run'))!;
    expect(quickStart.output).toBeDefined();
    // As the README says: saved as quickstart.mjs, run with node, DATABASE_URL set (a fresh database).
    await writeFile(join(app, 'quickstart.mjs'), quickStart.code);
    const url = (await useTestDatabase('quickstart')).url;
    const { stdout } = await run(process.execPath, ['quickstart.mjs'], { cwd: app, env: { ...process.env, DATABASE_URL: url }, timeout: 60_000 });
    expect(stdout).toBe(quickStart.output);
    // Only what the README's install line names came in: no optional peer, and pgfence without dependencies of its own.
    const installed = JSON.parse(await readFile(join(app, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };
    expect(Object.keys(installed.dependencies).sort()).toEqual(['pg', 'pgfence']);
    for (const optional of ['kysely', 'pg-boss', '@opentelemetry/api']) expect(existsSync(join(app, 'node_modules', optional)), optional).toBe(false);
  }, 240_000);

  it("loads with require('pgfence') (Node >= 20.19 loads ES modules through require)", async () => {
    const [major, minor] = process.versions.node.split('.').map(Number) as [number, number];
    expect(major > 20 || (major === 20 && minor >= 19), `Node ${process.versions.node} is older than 20.19`).toBe(true);
    const { stdout } = await run(
      process.execPath,
      [
        '--no-warnings',
        '-e',
        "const m = require('pgfence'); const k = require('pgfence/kysely'); const b = require('pgfence/pg-boss'); console.log(typeof m.createLocker, typeof k.pgfenceMigrations, typeof b.workWithLock, String(m.lockKey('order:123')));",
      ],
      { cwd: join(work, `consumer-${kyselyVersions[0]}`) },
    );
    expect(stdout.trim()).toBe('function function function -2046217617591970219');
  });
});
