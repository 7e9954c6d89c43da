import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { toJson, withBigintsAsStrings } from '../src/core/json.js';
import { anySignal, MAX_TIMER_MS, sleep, TIMED_OUT, within } from '../src/core/signals.js';
import { pgSqlExecutor } from '../src/core/sql-executor.js';
import { isConnectionLost, isLockNotAvailable, isQueryCanceled, isSchemaMissing } from '../src/core/sqlstate.js';
import { LockTimeoutError } from '../src/index.js';
import { useTestDatabase } from './support/db.js';

/** The shared helpers every module uses: signals and timers, SQLSTATEs, bigint-safe JSON, the SQL executor. */

describe('anySignal', () => {
  it('aborts with the first reason, also without AbortSignal.any (Node 20.0 to 20.2)', () => {
    const native = Object.getOwnPropertyDescriptor(AbortSignal, 'any')!;
    for (const withNative of [true, false]) {
      if (!withNative) delete (AbortSignal as { any?: unknown }).any;
      try {
        const a = new AbortController();
        const b = new AbortController();
        const both = anySignal(a.signal, undefined, b.signal);
        expect(both.aborted).toBe(false);
        b.abort(new Error('b first'));
        a.abort(new Error('a later'));
        expect(both.aborted).toBe(true);
        expect((both.reason as Error).message).toBe('b first');
        // Already aborted: at once.
        expect(anySignal(new AbortController().signal, AbortSignal.abort('gone')).reason).toBe('gone');
      } finally {
        Object.defineProperty(AbortSignal, 'any', native);
      }
    }
    const only = new AbortController().signal;
    expect(anySignal(undefined, only)).toBe(only);
  });
});

describe('sleep and within', () => {
  it('sleep waits past the ~24.8-day timer limit (no overflow to 1 ms) until its signal aborts', async () => {
    const warnings: Error[] = [];
    const onWarning = (w: Error) => warnings.push(w);
    process.on('warning', onWarning);
    try {
      const stop = new AbortController();
      let done = false;
      const slept = sleep(MAX_TIMER_MS + 5_000, stop.signal).then(() => (done = true));
      // A timer that overflowed would have fired by the time this one does.
      await new Promise((resolve) => setImmediate(resolve));
      await sleep(20);
      expect(done).toBe(false);
      stop.abort();
      await slept;
      expect(warnings.map((w) => w.name)).not.toContain('TimeoutOverflowWarning');
    } finally {
      process.removeListener('warning', onWarning);
    }
  });

  it('within gives the value, or TIMED_OUT for a promise that never settles', async () => {
    expect(await within(Promise.resolve(7), 60_000)).toBe(7);
    expect(await within(new Promise(() => {}), 1)).toBe(TIMED_OUT);
    await expect(within(Promise.reject(new Error('no')), 60_000)).rejects.toThrow('no');
  });
});

describe('bigint-safe JSON', () => {
  it('writes bigints as decimal strings, and copies errors keeping their class', () => {
    expect(toJson({ key: 2n ** 63n - 1n, at: new Date(0) })).toBe('{"key":"9223372036854775807","at":"1970-01-01T00:00:00.000Z"}');
    const err = new LockTimeoutError('n', -5n, 10);
    const copy = withBigintsAsStrings({ err, keys: [1n] }) as { err: LockTimeoutError; keys: unknown[] };
    expect(copy.err).toBeInstanceOf(LockTimeoutError);
    expect(copy.err.key).toBe('-5');
    expect(copy.keys).toEqual(['1']);
    expect(err.key).toBe(-5n);
  });
});

describe('SQLSTATE classifier and the pg executor, on real PostgreSQL errors', () => {
  let client: pg.Client;
  let other: pg.Client;
  beforeAll(async () => {
    const db = await useTestDatabase('core');
    client = new pg.Client({ connectionString: db.url });
    other = new pg.Client({ connectionString: db.url });
    await client.connect();
    await other.connect();
  });
  afterAll(async () => {
    await other.end();
    await client.end().catch(() => {});
  });
  const failure = (p: Promise<unknown>) =>
    p.then(
      () => {
        throw new Error('expected the statement to fail');
      },
      (e: unknown) => e,
    );

  it('classifies what the code reacts to', async () => {
    const sql = pgSqlExecutor(client);
    expect(await sql.script('SELECT 1 AS a; SELECT 2 AS b')).toEqual([[{ a: 1 }], [{ b: 2 }]]);
    for (const text of ['SELECT * FROM pgfence.nothing_here', 'SELECT no_such_function_here()', 'SELECT * FROM no_such_table_here']) {
      expect(isSchemaMissing(await failure(sql.query(text, []))), text).toBe(true);
    }
    await other.query('SELECT pg_advisory_lock(42)');
    const busy = await failure(sql.script("SET lock_timeout = '50ms'; SELECT pg_advisory_lock(42)"));
    expect([isLockNotAvailable(busy), isConnectionLost(busy), isSchemaMissing(busy)]).toEqual([true, false, false]);
    const cancelled = await failure(sql.script("SET lock_timeout = 0; SET statement_timeout = '50ms'; SELECT pg_advisory_lock(42)"));
    expect([isQueryCanceled(cancelled), isConnectionLost(cancelled)]).toEqual([true, false]);
    await client.query('RESET ALL');
    const pid = (await sql.query<{ pid: number }>('SELECT pg_backend_pid() AS pid', []))[0]!.pid;
    client.on('error', () => {});
    const gone = failure(sql.query('SELECT pg_sleep(30)', []));
    await other.query('SELECT pg_terminate_backend($1)', [pid]);
    expect(isConnectionLost(await gone)).toBe(true);
  });
});
