import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { appendFile, cp, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { InvalidArgumentError, LockUnavailableError, PgfenceError } from '../src/core/errors.js';
import { migrationProviderFor, pgfenceMigrations, type PgfenceMigrationProvider } from '../src/adapters/kysely/migrations.js';
import { planDefinitionMigrations, readDefinitionLog, DEFINITION_LOG_FILE } from '../src/migrate/definition-sets.js';
import { readMigrationSet, type MigrationFolders } from '../src/migrate/files.js';
import { migrate } from '../src/migrate/index.js';
import { MIGRATION_LOCK_KEY } from '../src/migrate/lock.js';
import { packageFolders } from '../src/migrate/package-folders.js';
import { runMigrations } from '../src/migrate/runner.js';
import { eventually, withDatabase } from './support/db.js';
import { freePort } from './support/server.js';
import { kyselyMigrator, type TestMigrator } from './support/versions.js';

const fixtures = fileURLToPath(new URL('./fixtures/migrate/', import.meta.url));
const childScript = join(fixtures, 'migrate-child.mjs');

// ---------------------------------------------------------------------------------------------
// Helpers: a fresh database per test (history lives in the fixed pgfence schema), fixture copies.

const createdDatabases: string[] = [];
const tempDirs: string[] = [];

async function freshDatabase(label: string): Promise<string> {
  const base = inject('databaseUrl');
  const name = `pgfence_migrate_${label}_${randomBytes(4).toString('hex')}`;
  await withClient(base, (c) => c.query(`CREATE DATABASE ${name}`));
  createdDatabases.push(name);
  return withDatabase(base, name);
}

afterAll(async () => {
  const base = inject('databaseUrl');
  await withClient(base, async (c) => {
    for (const name of createdDatabases) await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  });
  await Promise.all(tempDirs.map((d) => rm(d, { recursive: true, force: true })));
});

async function withClient<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

async function query<R extends pg.QueryResultRow>(url: string, text: string, values: unknown[] = []): Promise<R[]> {
  return withClient(url, async (c) => (await c.query<R>(text, values)).rows);
}

async function withPool<T>(url: string, fn: (pool: pg.Pool) => Promise<T>, max = 2): Promise<T> {
  const pool = new pg.Pool({ connectionString: url, max });
  try {
    return await fn(pool);
  } finally {
    await pool.end();
  }
}

/** A private, editable copy of a fixture's folders. */
async function copyFixture(name: string): Promise<MigrationFolders> {
  const dir = await mkdtemp(join(tmpdir(), 'pgfence-migrate-'));
  tempDirs.push(dir);
  await cp(join(fixtures, name), dir, { recursive: true });
  return { migrationsDir: join(dir, 'migrations'), sqlDir: join(dir, 'sql') };
}

function fixtureFolders(name: string): MigrationFolders {
  return { migrationsDir: join(fixtures, name, 'migrations'), sqlDir: join(fixtures, name, 'sql') };
}

function runOn(url: string, folders: MigrationFolders, opts: { lockTimeoutMs?: number } = {}) {
  return withPool(url, (pool) => runMigrations({ pool, ...folders, ...opts }));
}

async function rejection(promise: Promise<unknown>): Promise<PgfenceError> {
  const outcome = await promise.then(
    () => new Error('expected a rejection'),
    (err: unknown) => err,
  );
  expect(outcome).toBeInstanceOf(PgfenceError);
  return outcome as PgfenceError;
}

async function appliedVersions(url: string): Promise<number[]> {
  return (await query<{ version: number }>(url, 'SELECT version FROM pgfence.schema_migrations ORDER BY version')).map((r) => r.version);
}

async function tableExists(url: string, name: string): Promise<boolean> {
  const [row] = await query<{ exists: boolean }>(url, 'SELECT to_regclass($1) IS NOT NULL AS exists', [name]);
  return row!.exists;
}

async function fixtureVersion(url: string): Promise<number> {
  const [row] = await query<{ v: number }>(url, 'SELECT public.fixture_version() AS v');
  return row!.v;
}

async function definitionTimes(url: string): Promise<Map<string, string>> {
  const rows = await query<{ name: string; at: string }>(url, 'SELECT name, applied_at::text AS at FROM pgfence.schema_definitions');
  return new Map(rows.map((r) => [r.name, r.at]));
}

/** Sessions of this database holding (granted) or waiting for (not granted) the migration lock. */
async function migrationLockHolders(url: string, granted: boolean): Promise<number> {
  const [row] = await query<{ n: number }>(
    url,
    `SELECT count(*)::int AS n FROM pg_locks
      WHERE locktype = 'advisory' AND objsubid = 1 AND granted = $2
        AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
        AND ((classid::int8 << 32) | objid::int8) = $1::int8`,
    [MIGRATION_LOCK_KEY.toString(), granted],
  );
  return row!.n;
}

/** What migrate() applies to an empty database: every file of the package, in order. */
async function packageLabels(): Promise<string[]> {
  const files = await readMigrationSet(packageFolders());
  return [...files.migrations, ...files.definitions].map((f) => f.label);
}

async function packageVersions(): Promise<number[]> {
  return (await readMigrationSet(packageFolders())).migrations.map((f) => f.version);
}

async function packageKyselyNames(): Promise<string[]> {
  return Object.keys(await pgfenceMigrations().getMigrations()).sort();
}

// ---------------------------------------------------------------------------------------------

describe('migrate() with the package schema', () => {
  let url: string;
  beforeAll(async () => {
    url = await freshDatabase('package');
  });

  it('creates the pgfence tables on a fresh database and reports what it applied', async () => {
    const result = await migrate({ connectionString: url });
    expect(result.applied).toEqual(await packageLabels());
    expect(result.applied[0]).toBe('migrations/0001_schema.sql');

    const columns = await query<{ table_name: string; column_name: string; data_type: string; is_nullable: string }>(
      url,
      `SELECT table_name, column_name, data_type, is_nullable FROM information_schema.columns
        WHERE table_schema = 'pgfence' AND table_name IN ('fencing_tokens', 'leases', 'lock_names')
        ORDER BY table_name, ordinal_position`,
    );
    const shape = columns.map((c) => `${c.table_name}.${c.column_name} ${c.data_type}${c.is_nullable === 'NO' ? ' not null' : ''}`);
    expect(shape).toEqual([
      'fencing_tokens.key bigint not null',
      'fencing_tokens.token bigint not null',
      'fencing_tokens.updated_at timestamp with time zone not null',
      'leases.key bigint not null',
      'leases.name text',
      'leases.owner text not null',
      'leases.token bigint not null',
      'leases.acquired_at timestamp with time zone not null',
      'leases.renewed_at timestamp with time zone not null',
      'leases.expires_at timestamp with time zone not null',
      'leases.released_at timestamp with time zone',
      'leases.data jsonb',
      'leases.held_until timestamp with time zone',
      'lock_names.key bigint not null',
      'lock_names.name text not null',
      'lock_names.namespace text',
      'lock_names.registered_at timestamp with time zone not null',
    ]);
    // 0002 dropped the expires_at index again (it made every lease update non-HOT).
    const indexes = await query<{ indexdef: string }>(url, `SELECT indexdef FROM pg_indexes WHERE schemaname = 'pgfence' AND tablename = 'leases'`);
    expect(indexes.some((i) => /\(expires_at\)/.test(i.indexdef))).toBe(false);
    await expect(query(url, 'INSERT INTO pgfence.fencing_tokens (key, token) VALUES (1, 0)')).rejects.toThrow(/check constraint/);

    const history = await query<{ version: number; name: string; checksum: string }>(url, 'SELECT version, name, checksum FROM pgfence.schema_migrations');
    expect(history).toEqual([
      { version: 1, name: '0001_schema.sql', checksum: expect.stringMatching(/^[0-9a-f]{64}$/) },
      { version: 2, name: '0002_lease_updates_stay_hot.sql', checksum: expect.stringMatching(/^[0-9a-f]{64}$/) },
      { version: 3, name: '0003_lease_hold_until.sql', checksum: expect.stringMatching(/^[0-9a-f]{64}$/) },
      { version: 4, name: '0004_token_sequence.sql', checksum: expect.stringMatching(/^[0-9a-f]{64}$/) },
    ]);
  });

  it('applies nothing the second time', async () => {
    expect(await migrate({ connectionString: url })).toEqual({ applied: [] });
  });

  it('runs on a pool of the caller and gives the connection back as it found it', async () => {
    await withPool(
      url,
      async (pool) => {
        expect(await migrate({ pool })).toEqual({ applied: [] });
        expect(pool.totalCount).toBe(1);
        expect(pool.idleCount).toBe(1);
        const [setting] = (await pool.query<{ lock_timeout: string }>('SHOW lock_timeout')).rows;
        expect(setting!.lock_timeout).toBe('0');
      },
      1,
    );
    expect(await migrationLockHolders(url, true)).toBe(0);
  });
});

describe('migrate() from five processes at once', () => {

  it('lets every process succeed and applies each file exactly once', async () => {
    const url = await freshDatabase('concurrent');
    // Hold the lock until all five wait on it, so that they really do contend.
    await withClient(url, async (holder) => {
      await holder.query('SELECT pg_advisory_lock($1::int8)', [MIGRATION_LOCK_KEY.toString()]);
      const children = Array.from({ length: 5 }, () => runChild(url));
      try {
        await eventually(async () => (await migrationLockHolders(url, false)) === 5, 30_000, 'five runs waiting for the migration lock');
      } finally {
        await holder.query('SELECT pg_advisory_unlock($1::int8)', [MIGRATION_LOCK_KEY.toString()]);
      }
      const results = await Promise.all(children);
      for (const r of results) expect({ code: r.code, stderr: r.stderr }).toEqual({ code: 0, stderr: '' });
      const applied = results.flatMap((r) => (JSON.parse(r.stdout) as { applied: string[] }).applied);
      expect(applied).toEqual(await packageLabels());
    });
    const perVersion = await query<{ version: number; n: number }>(url, 'SELECT version, count(*)::int AS n FROM pgfence.schema_migrations GROUP BY version ORDER BY version');
    const files = await readMigrationSet(packageFolders());
    expect(perVersion).toEqual(files.migrations.map((f) => ({ version: f.version, n: 1 })));
  });
});

describe('0004_token_sequence on a database that has issued tokens (issue 30, gap 1)', () => {
  it('starts the sequence above every counter: no key reissues a rolled-back token after the upgrade', async () => {
    const url = await freshDatabase('token_upgrade');
    // The schema as 0003 left it (no definitions needed), with counters a deployment would have: one
    // on timeline 1 and one issued after a promotion (timeline 2, the floor 1 << 48 plus a counter).
    const dir = await mkdtemp(join(tmpdir(), 'pgfence-migrate-'));
    tempDirs.push(dir);
    const folders = { migrationsDir: join(dir, 'migrations'), sqlDir: join(dir, 'sql') };
    await cp(packageFolders().migrationsDir, folders.migrationsDir, { recursive: true, filter: (f) => !/0004_token_sequence/.test(f) });
    await cp(fixtures + 'basic/sql', folders.sqlDir, { recursive: true, filter: (f) => !f.endsWith('.sql') });
    await runOn(url, folders);
    expect(await appliedVersions(url)).toEqual([1, 2, 3]);
    await query(url, `INSERT INTO pgfence.fencing_tokens (key, token) VALUES (1, 5000), (2, (1::int8 << 48) + 7000)`);
    await migrate({ connectionString: url });
    await withClient(url, async (c) => {
      for (const key of [1n, 2n, 3n]) {
        await c.query('BEGIN');
        const rolledBack = BigInt((await c.query<{ t: string }>('SELECT pgfence.next_token($1)::text AS t', [key])).rows[0]!.t);
        await c.query('ROLLBACK');
        const next = BigInt((await c.query<{ t: string }>('SELECT pgfence.next_token($1)::text AS t', [key])).rows[0]!.t);
        expect(rolledBack, `key ${key}: above every counter`).toBeGreaterThan((1n << 48n) + 7000n);
        expect(next, `key ${key}`).toBeGreaterThan(rolledBack);
      }
    });
  });
});

describe('runMigrations() over fixture folders', () => {
  it('applies migrations in order, then definitions, each once', async () => {
    const url = await freshDatabase('fixture');
    const folders = fixtureFolders('basic');
    expect(await runOn(url, folders)).toEqual({
      applied: ['migrations/0001_create_items.sql', 'migrations/0002_add_item_notes.sql', 'sql/fixture_version.sql', 'sql/item_notes.sql'],
    });
    expect(await appliedVersions(url)).toEqual([1, 2]);
    expect(await fixtureVersion(url)).toBe(1);
    expect(await runOn(url, folders)).toEqual({ applied: [] });
  });

  it('re-applies a changed definition and leaves an unchanged one alone', async () => {
    const url = await freshDatabase('definitions');
    const folders = await copyFixture('basic');
    await runOn(url, folders);
    const before = await definitionTimes(url);

    await writeFile(join(folders.sqlDir, 'fixture_version.sql'), 'CREATE OR REPLACE FUNCTION public.fixture_version() RETURNS int LANGUAGE sql AS $$ SELECT 2 $$;\n');
    expect(await runOn(url, folders)).toEqual({ applied: ['sql/fixture_version.sql'] });
    expect(await fixtureVersion(url)).toBe(2);
    const after = await definitionTimes(url);
    expect(after.get('item_notes.sql')).toBe(before.get('item_notes.sql'));
    expect(after.get('fixture_version.sql')).not.toBe(before.get('fixture_version.sql'));
    expect(await runOn(url, folders)).toEqual({ applied: [] });
  });

  it('refuses an edited applied migration before applying anything else', async () => {
    const url = await freshDatabase('edited');
    const folders = await copyFixture('basic');
    await runOn(url, folders);

    await appendFile(join(folders.migrationsDir, '0001_create_items.sql'), '\n-- an innocent-looking edit\n');
    await writeFile(join(folders.migrationsDir, '0003_more_items.sql'), 'CREATE TABLE public.more_items (id int);\n');
    await writeFile(join(folders.sqlDir, 'fixture_version.sql'), 'CREATE OR REPLACE FUNCTION public.fixture_version() RETURNS int LANGUAGE sql AS $$ SELECT 2 $$;\n');

    const err = await rejection(runOn(url, folders));
    expect(err.code).toBe('PGFENCE_MIGRATION_EDITED');
    expect(err.message).toContain('migrations/0001_create_items.sql');
    expect(err.message).toMatch(/do not edit applied migrations.*add a new migration/i);
    expect(await appliedVersions(url)).toEqual([1, 2]);
    expect(await tableExists(url, 'public.more_items')).toBe(false);
    expect(await fixtureVersion(url)).toBe(1);
  });

  it('rolls a failing migration back with its history row and stops there', async () => {
    const url = await freshDatabase('failing');
    await withPool(url, async (pool) => {
      const err = await rejection(runMigrations({ pool, ...fixtureFolders('failing') }));
      expect(err.code).toBe('PGFENCE_MIGRATION_FAILED');
      expect(err.message).toContain('migrations/0002_broken.sql');
      expect(err.message).toContain('division by zero');
      // The connection went back to the pool, out of its transaction and without the lock.
      const [state] = (await pool.query<{ in_tx: boolean }>('SELECT now() <> statement_timestamp() AS in_tx')).rows;
      expect(state!.in_tx).toBe(false);
    });
    expect(await appliedVersions(url)).toEqual([1]);
    expect(await tableExists(url, 'public.fine')).toBe(true);
    expect(await tableExists(url, 'public.half_done')).toBe(false);
    expect(await tableExists(url, 'public.never')).toBe(false);
    expect(await migrationLockHolders(url, true)).toBe(0);
  });

  it.each([
    ['a file name without four digits', 'bad-name', /001_too_few_digits\.sql is not a migration file/],
    ['two files with one version', 'duplicate-version', /0001_first\.sql and migrations\/0001_second\.sql have the same version/],
  ])('rejects %s without touching the database', async (_what, fixture, message) => {
    const url = await freshDatabase('invalid');
    await withPool(url, async (pool) => {
      const err = await rejection(runMigrations({ pool, ...fixtureFolders(fixture) }));
      expect(err.code).toBe('PGFENCE_MIGRATION_INVALID');
      expect(err.message).toMatch(message);
      expect(pool.totalCount).toBe(0);
    });
  });

  it('works without a sql/ folder', async () => {
    const url = await freshDatabase('no_sql');
    const folders = await copyFixture('basic');
    await rm(folders.sqlDir, { recursive: true });
    expect(await runOn(url, folders)).toEqual({ applied: ['migrations/0001_create_items.sql', 'migrations/0002_add_item_notes.sql'] });
  });

  it('waits for a run in progress, and gives up after lockTimeoutMs', async () => {
    const url = await freshDatabase('lock_wait');
    const folders = fixtureFolders('basic');
    await withClient(url, async (holder) => {
      await holder.query('SELECT pg_advisory_lock($1::int8)', [MIGRATION_LOCK_KEY.toString()]);

      await withPool(
        url,
        async (pool) => {
          const err = await rejection(runMigrations({ pool, ...folders, lockTimeoutMs: 200 }));
          expect(err.code).toBe('PGFENCE_MIGRATION_LOCK_TIMEOUT');
          // The connection is still fine: back in the pool, with its own lock_timeout.
          expect(pool.idleCount).toBe(1);
          const [setting] = (await pool.query<{ lock_timeout: string }>('SHOW lock_timeout')).rows;
          expect(setting!.lock_timeout).toBe('0');
        },
        1,
      );
      expect(await tableExists(url, 'pgfence.schema_migrations')).toBe(false);

      const waiting = runOn(url, folders);
      await eventually(async () => (await migrationLockHolders(url, false)) === 1, 15_000, 'the run to wait');
      expect(await tableExists(url, 'pgfence.schema_migrations')).toBe(false);
      await holder.query('SELECT pg_advisory_unlock($1::int8)', [MIGRATION_LOCK_KEY.toString()]);
      expect((await waiting).applied).toHaveLength(4);
    });
  });
});

describe('migrate() arguments', () => {
  it.each([
    ['null', null],
    ['an array', []],
    ['an empty connection string', { connectionString: '' }],
    ['a blank connection string', { connectionString: '  ' }],
    ['a number as connection string', { connectionString: 5432 }],
    ['null as connection string', { connectionString: null }],
    ['an object that is not a pool', { pool: {} }],
    ['a URL as pool', { pool: 'postgres://localhost/db' }],
    ['null as pool', { pool: null }],
  ])('rejects %s with InvalidArgumentError', async (_what, opts) => {
    await expect(migrate(opts as never)).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  it('rejects both connectionString and pool without connecting to either', async () => {
    const connections: number[] = [];
    const server: Server = createServer((socket) => {
      connections.push(1);
      socket.destroy();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as { port: number };
    const url = `postgres://nobody@127.0.0.1:${port}/nothing`;
    const pool = new pg.Pool({ connectionString: url });
    try {
      const err = await rejection(migrate({ connectionString: url, pool }));
      expect(err).toBeInstanceOf(InvalidArgumentError);
      expect(err.message).toMatch(/not both/);
      expect(pool.totalCount).toBe(0);
      expect(connections).toHaveLength(0);
    } finally {
      await pool.end();
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('reports an unreachable database as LockUnavailableError', async () => {
    const port = await freePort();
    const err = await rejection(migrate({ connectionString: `postgres://nobody@127.0.0.1:${port}/nothing` }));
    expect(err).toBeInstanceOf(LockUnavailableError);
  });
});

const Migrator = await kyselyMigrator();

describe('pgfenceMigrations() with Kysely', () => {
  /** A Kysely of its own for one test, destroyed (its pool ended) when the test is done. */
  async function withKysely<T>(url: string, fn: (db: Kysely<unknown>) => Promise<T>): Promise<T> {
    const db = new Kysely<unknown>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url, max: 3 }) }) });
    try {
      return await fn(db);
    } finally {
      await db.destroy();
    }
  }

  function pgfenceMigrator(db: Kysely<unknown>, provider: PgfenceMigrationProvider = pgfenceMigrations(), extra: { disableTransactions?: boolean } = {}) {
    return new Migrator({
      db,
      provider,
      migrationTableName: 'pgfence_kysely_migration',
      migrationLockTableName: 'pgfence_kysely_migration_lock',
      ...extra,
    });
  }

  async function migrateToLatest(migrator: TestMigrator): Promise<string[]> {
    const { error, results } = await migrator.migrateToLatest();
    if (error) throw error;
    for (const r of results ?? []) expect(r.status, r.migrationName).toBe('Success');
    return (results ?? []).map((r) => r.migrationName);
  }

  it('applies the schema under its own table names, after which migrate() applies nothing', async () => {
    const url = await freshDatabase('kysely');
    await withKysely(url, async (db) => {
      expect(await migrateToLatest(pgfenceMigrator(db))).toEqual(await packageKyselyNames());
      expect(await tableExists(url, 'pgfence.leases')).toBe(true);
      expect(await tableExists(url, 'public.pgfence_kysely_migration')).toBe(true);
      expect(await tableExists(url, 'public.pgfence_kysely_migration_lock')).toBe(true);
      expect(await tableExists(url, 'public.kysely_migration')).toBe(false);
      expect(await appliedVersions(url)).toEqual(await packageVersions());

      expect(await migrate({ connectionString: url })).toEqual({ applied: [] });
      expect(await migrateToLatest(pgfenceMigrator(db))).toEqual([]);
    });
  });

  it('after migrate(), records the files without applying them again', async () => {
    const url = await freshDatabase('kysely_after');
    await migrate({ connectionString: url });
    const before = await query(url, 'SELECT version, applied_at::text FROM pgfence.schema_migrations');
    // Applying 0001_schema.sql again would fail (CREATE TABLE without IF NOT EXISTS).
    expect(await withKysely(url, (db) => migrateToLatest(pgfenceMigrator(db)))).toEqual(await packageKyselyNames());
    expect(await query(url, 'SELECT version, applied_at::text FROM pgfence.schema_migrations')).toEqual(before);
  });

  it('is safe to run at the same time as migrate()', async () => {
    const url = await freshDatabase('kysely_race');
    const [kyselyNames] = await Promise.all([
      withKysely(url, (db) => migrateToLatest(pgfenceMigrator(db))),
      migrate({ connectionString: url }),
    ]);
    expect(kyselyNames).toEqual(await packageKyselyNames());
    expect(await appliedVersions(url)).toEqual(await packageVersions());
  });

  it('works with disableTransactions', async () => {
    const url = await freshDatabase('kysely_notx');
    const names = await withKysely(url, (db) => migrateToLatest(pgfenceMigrator(db, pgfenceMigrations(), { disableTransactions: true })));
    expect(names).toEqual(await packageKyselyNames());
    expect(await appliedVersions(url)).toEqual(await packageVersions());
  });

  it('re-applies changed definitions under a new name that sorts last, keeping the old one', async () => {
    const url = await freshDatabase('kysely_defs');
    const folders = await copyFixture('basic');
    await withKysely(url, async (db) => {
      const migrateFixture = () => migrateToLatest(pgfenceMigrator(db, migrationProviderFor(folders)));
      expect(await migrateFixture()).toEqual(['0001_create_items', '0002_add_item_notes', '0002~definitions-r0001-e613e51b']);
      expect(await fixtureVersion(url)).toBe(1);
      const before = await definitionTimes(url);

      await writeFile(join(folders.sqlDir, 'fixture_version.sql'), 'CREATE OR REPLACE FUNCTION public.fixture_version() RETURNS int LANGUAGE sql AS $$ SELECT 2 $$;\n');
      const [changed] = await migrateFixture();
      expect(changed).toMatch(/^0002~definitions-r0002-[0-9a-f]{8}$/);
      expect(await fixtureVersion(url)).toBe(2);
      expect((await definitionTimes(url)).get('item_notes.sql')).toBe(before.get('item_notes.sql'));
      expect(await runOn(url, folders)).toEqual({ applied: [] });

      // The maintainer logs the new name: nothing changes for databases that already ran it.
      await appendFile(join(folders.sqlDir, DEFINITION_LOG_FILE), `${changed}\n`);
      expect(await migrateFixture()).toEqual([]);

      // A later migration sorts after every definitions name before it.
      await writeFile(join(folders.migrationsDir, '0003_more_items.sql'), 'CREATE TABLE public.more_items (id int);\n');
      expect(await migrateFixture()).toEqual(['0003_more_items']);
    });
  });

  it('refuses an edited applied migration', async () => {
    const url = await freshDatabase('kysely_edited');
    const folders = await copyFixture('basic');
    await withKysely(url, async (db) => {
      await migrateToLatest(pgfenceMigrator(db, migrationProviderFor(folders)));
      await appendFile(join(folders.migrationsDir, '0001_create_items.sql'), '\n-- an innocent-looking edit\n');
      await writeFile(join(folders.migrationsDir, '0003_more_items.sql'), 'CREATE TABLE public.more_items (id int);\n');
      const { error } = await pgfenceMigrator(db, migrationProviderFor(folders)).migrateToLatest();
      expect(error).toBeInstanceOf(PgfenceError);
      expect((error as PgfenceError).code).toBe('PGFENCE_MIGRATION_EDITED');
    });
    expect(await tableExists(url, 'public.more_items')).toBe(false);
  });

  it("has the package's current definition set in its log (append the new name when sql/ changes)", async () => {
    const folders = packageFolders();
    const files = await readMigrationSet(folders);
    const log = await readDefinitionLog(folders.sqlDir);
    const plan = planDefinitionMigrations(log, files.definitions, files.migrations);
    expect(plan.current === null || plan.current === log.at(-1), `append ${plan.current} to sql/${DEFINITION_LOG_FILE}`).toBe(true);
  });
});

function runChild(url: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [childScript, url], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}
