import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { beforeAll, describe, expect, it } from 'vitest';
import { EXAMPLE_SCHEMA, generatePrismaClient } from './support/adapters/prisma-client.js';
import { useMigratedDatabase } from './support/db.js';

const run = promisify(execFile);
const root = fileURLToPath(new URL('..', import.meta.url));
let url: string;

beforeAll(async () => {
  url = (await useMigratedDatabase('examples')).url;
});

/**
 * The libpq environment that names the test database, and no DATABASE_URL: createLocker(), migrate()
 * and pg.Pool find it there when they are given no connection string, as psql does.
 */
function libpqEnv(databaseUrl: string): NodeJS.ProcessEnv {
  const u = new URL(databaseUrl);
  const { DATABASE_URL: _, ...env } = process.env;
  return { ...env, PGHOST: u.hostname, PGPORT: u.port || '5432', PGUSER: decodeURIComponent(u.username), PGDATABASE: u.pathname.slice(1), PGPASSWORD: decodeURIComponent(u.password) };
}

/** Each program in examples/ runs as a user would run it (importing 'pgfence'), against its own database named by PG* variables. */
async function example(name: string): Promise<string> {
  const { stdout } = await run(process.execPath, [`examples/${name}.mjs`], {
    cwd: root,
    env: libpqEnv(url),
    timeout: 60_000,
  });
  return stdout;
}

describe('examples/', () => {
  it('critical-section: concurrent charges never interleave', async () => {
    expect(await example('critical-section')).toContain('balance after 20 concurrent charges of 1: 80');
  });

  it('cron-singleton: three hosts on skewed schedules run each period once', async () => {
    const out = await example('cron-singleton');
    for (const period of [0, 1, 2]) expect(out).toMatch(new RegExp(`period ${period}: ran 1 time\\(s\\), on host [abc]\\n`));
  });

  it('skip-if-busy: the second instance skips', async () => {
    const out = await example('skip-if-busy');
    expect(out).toContain('instance a: report built');
    expect(out).toContain('instance b: skipped');
  });

  it('fenced-write: the stale holder is refused', async () => {
    const out = await example('fenced-write');
    expect(out).toContain('old holder lost its lease: true');
    expect(out).toMatch(/old holder writes: applied=false reason=stale currentToken=\d+/);
    expect(out).toContain('invoice 42 is paid');
  });

  it('read-modify-write: reading before claiming loses an increment, claiming first loses none', async () => {
    const out = await example('read-modify-write');
    expect(out).toContain('read then write: 2 increments applied, counter = 1');
    expect(out).toContain('claim then write: 1 increment applied, counter = 1; A was refused: stale');
  });

  it('transaction-lock: numbers are issued once each', async () => {
    expect(await example('transaction-lock')).toContain('numbers issued: 1,2,3,4,5,6,7,8,9,10');
  });

  it('kysely: a guarded builder refuses an older token', async () => {
    const out = await example('kysely');
    expect(out).toMatch(/update with the older token \d+: 0 rows updated \(stale: token \d+ wrote it\)/);
    expect(out).toContain('balance: 85');
  });

  it('knex: the schema through Knex, a guarded builder refuses an older token, a versioned update notices the race', async () => {
    const out = await example('knex');
    expect(out).toMatch(/pgfence schema up to date \(\d+ name\(s\) recorded by Knex's migrator this time\)/);
    expect(out).toMatch(/update with the older token \d+: 0 rows updated \(stale: token \d+ wrote it\)/);
    expect(out).toContain('second conflict (now version 1)');
    expect(out).toContain('balance: 84');
  });

  it('postgres: a guarded update refuses an older token; a busy lock’s timeout leaves the transaction usable', async () => {
    const out = await example('postgres');
    expect(out).toMatch(/update with the older token \d+: 0 rows updated \(stale: token \d+ wrote it\)/);
    expect(out).toContain('account:1 is busy (PGFENCE_LOCK_TIMEOUT): the transaction goes on');
    expect(out).toContain('committed, balance 85');
  });

  it('typeorm: the guarded builder and an entity-typed fencedUpdate refuse an older token; so does the table', async () => {
    const out = await example('typeorm');
    expect(out).toMatch(/update with the older token \d+: 0 rows updated \(stale: token \d+ wrote it\)/);
    expect(out).toContain('a plain UPDATE with the older token: refused by the table (PGF01)');
    expect(out).toMatch(/balance: 85, written with token \d+/);
  });

  it('prisma: a transaction lock in $transaction, and a guarded write by model that refuses an older token', async () => {
    // The example imports its generated client (TypeScript, as Prisma 7 generates it): run with a TS loader, as users run tsx.
    await generatePrismaClient(EXAMPLE_SCHEMA);
    const { stdout } = await run(process.execPath, ['--import', './test/support/ts-loader.mjs', 'examples/prisma/main.mjs'], { cwd: root, env: libpqEnv(url), timeout: 120_000 });
    expect(stdout).toMatch(/update with the older token \d+: 0 rows updated \(stale: token \d+ wrote it\)/);
    expect(stdout).toContain('balance: 85');
  });

  it('drizzle: a guarded builder refuses an older token; a versioned update refuses the second writer', async () => {
    const out = await example('drizzle');
    expect(out).toMatch(/update with the older token \d+: 0 rows updated \(stale: token \d+ wrote it\)/);
    expect(out).toContain('second writer: conflict (version is now 1)');
    expect(out).toContain('balance: 86');
  });

  it('semaphore: never more calls in flight than permits', async () => {
    expect(await example('semaphore')).toContain('12 calls, at most 3 in flight');
  });

  it('leader: a resignation hands over with a higher epoch', async () => {
    const out = await example('leader');
    const epochs = [...out.matchAll(/elected, epoch (\d+)/g)].map((m) => Number(m[1]));
    expect(epochs).toHaveLength(2);
    expect(epochs[1]).toBeGreaterThan(epochs[0]!);
    expect(out).toContain('(resigned)');
  });

  it('pg-boss: jobs of one order never overlap', async () => {
    expect(await example('pg-boss')).toContain('8 jobs on 2 orders done; same-order overlaps: 0');
  });

  it('observe: events, inspect and stats', async () => {
    const out = await example('observe');
    expect(out).toContain('held: example:report (exclusive)');
    expect(out).toMatch(/lease: example:import owner=importer-1 token=\d+ left=\d+s/);
    expect(out).toContain('"acquired":2');
  });
});
