import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLocker, InvalidArgumentError, NotInTransactionError, tryXactLock, xactLock, type Locker } from '../src/index.js';
import { freePortUrl, useTestDatabase } from './support/db.js';

/**
 * Every argument's edges get a clear InvalidArgumentError before any I/O. The locker points at a port
 * where nothing listens: had any call reached the network it would fail with LockUnavailableError.
 */
const badNames: [string, unknown][] = [
  ['empty', ''],
  ['NUL', 'a\0b'],
  ['lone surrogate', '\uDC00x'],
  ['too long', 'n'.repeat(1025)],
  ['null', null],
  ['undefined', undefined],
  ['object', { name: 'x' }],
  ['array', ['x']],
  ['NaN', NaN],
  ['fraction', 1.5],
  ['unsafe integer', 2 ** 60],
  ['out-of-range bigint', 2n ** 64n],
  ['boolean', true],
  ['function', () => 'x'],
];
const badTimeouts: unknown[] = [-1, NaN, -Infinity, '100', null, 1e30, {}];

describe('createLocker', () => {
  it.each<[string, unknown]>([
    ['no options', undefined],
    ['neither url nor pool', {}],
    ['both url and pool', { connectionString: 'postgres://x', pool: new pg.Pool() }],
    ['empty url', { connectionString: '' }],
    ['url of the wrong type', { connectionString: 5432 }],
    ['a pool that is not one', { pool: {} }],
    ['maxSessions 0', { connectionString: 'postgres://x', maxSessions: 0 }],
    ['maxSessions NaN', { connectionString: 'postgres://x', maxSessions: NaN }],
    ['maxSessions 1.5', { connectionString: 'postgres://x', maxSessions: 1.5 }],
    ['maxSessions huge', { connectionString: 'postgres://x', maxSessions: 1e9 }],
    ['keepaliveMs negative', { connectionString: 'postgres://x', keepaliveMs: -5 }],
    ['keepaliveMs Infinity', { connectionString: 'postgres://x', keepaliveMs: Infinity }],
    ['defaultTimeoutMs NaN', { connectionString: 'postgres://x', defaultTimeoutMs: NaN }],
    ['empty namespace', { connectionString: 'postgres://x', namespace: '' }],
    ['namespace with NUL', { connectionString: 'postgres://x', namespace: 'a\0' }],
    ['logger without methods', { connectionString: 'postgres://x', logger: {} }],
    ['meter that is not one', { connectionString: 'postgres://x', meter: 42 }],
  ])('rejects %s', (_label, options) => {
    expect(() => createLocker(options as never)).toThrow(InvalidArgumentError);
  });
});

describe('locker calls', () => {
  let locker: Locker;
  beforeAll(async () => {
    locker = createLocker({ connectionString: await freePortUrl('postgres://postgres@127.0.0.1:5432/postgres') });
  });
  afterAll(() => locker.close());

  it.each(badNames)('acquire rejects a %s name', async (_label, name) => {
    await expect(locker.acquire(name as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(locker.tryAcquire(name as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(locker.withLock(name as never, async () => 1)).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  it.each(badTimeouts)('acquire rejects timeoutMs %s', async (timeoutMs) => {
    await expect(locker.acquire('ok', { timeoutMs: timeoutMs as never })).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  it.each<[string, unknown]>([
    ['mode', { mode: 'EXCLUSIVE' }],
    ['mode type', { mode: 1 }],
    ['signal', { signal: 'stop' }],
    ['ttlMs 0', { ttlMs: 0 }],
    ['ttlMs negative', { ttlMs: -1 }],
    ['ttlMs NaN', { ttlMs: NaN }],
    ['ttlMs Infinity', { ttlMs: Infinity }],
    ['fencing type', { fencing: 'yes' }],
    ['shared fencing', { mode: 'shared', fencing: true }],
    ['allowNested type', { allowNested: 1 }],
    ['options type', 'fast'],
  ])('acquire rejects a bad %s', async (_label, opts) => {
    await expect(locker.acquire('ok', opts as never)).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  it('tryAcquire refuses a timeout (it never waits)', async () => {
    await expect(locker.tryAcquire('ok', { timeoutMs: 100 } as never)).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  it('withLock refuses a callback that is not a function', async () => {
    await expect(locker.withLock('ok', 'fn' as never)).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  it.each<[string, unknown]>([
    ['empty list', []],
    ['not a list', 'a'],
    ['a bad name inside', ['a', '']],
  ])('acquireAll rejects %s', async (_label, names) => {
    await expect(locker.acquireAll(names as never)).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  it('touched nothing: no session was ever opened', () => {
    expect(locker.stats().sessions).toBe(0);
  });

  it('an aborted signal rejects at once with its reason', async () => {
    const reason = new Error('already aborted');
    await expect(locker.acquire('ok', { signal: AbortSignal.abort(reason) })).rejects.toBe(reason);
  });
});

describe('xactLock arguments', () => {
  let client: pg.Client;
  beforeAll(async () => {
    const db = await useTestDatabase('bad_input');
    client = new pg.Client({ connectionString: db.url });
    await client.connect();
  });
  afterAll(() => client.end());

  it.each(badNames)('rejects a %s name and leaves the transaction clean', async (_label, name) => {
    await client.query('BEGIN');
    await expect(xactLock(client, name as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(tryXactLock(client, name as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    const { rows } = await client.query(`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`);
    expect(rows[0].n).toBe(0);
    await client.query('COMMIT'); // the transaction is still usable
  });

  it.each(badTimeouts)('rejects timeoutMs %s', async (timeoutMs) => {
    await client.query('BEGIN');
    await expect(xactLock(client, 'ok', { timeoutMs: timeoutMs as never })).rejects.toBeInstanceOf(InvalidArgumentError);
    await client.query('COMMIT');
  });

  it('rejects something that is not a client', async () => {
    await expect(xactLock({} as never, 'ok')).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(xactLock(null as never, 'ok')).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  it('outside a transaction: NotInTransactionError, and no lock is left behind', async () => {
    await expect(xactLock(client, 'outside')).rejects.toBeInstanceOf(NotInTransactionError);
    await expect(tryXactLock(client, 'outside')).rejects.toBeInstanceOf(NotInTransactionError);
    const { rows } = await client.query(`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`);
    expect(rows[0].n).toBe(0);
  });
});
