import { createServer, type Server } from 'node:net';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createLocker,
  fencedUpdate,
  fencingColumnSql,
  InvalidArgumentError,
  lockKey,
  migrate,
  NotInTransactionError,
  tryXactLock,
  xactLock,
  type Locker,
} from '../src/index.js';
import { workWithLock, type BossLike } from '../src/pg-boss/index.js';
import { useTestDatabase } from './support/db.js';

/**
 * Every argument's edges get a clear InvalidArgumentError before any I/O. The locker points at a
 * server that counts the connections it is offered (and drops them): had any call reached the network,
 * even in the background, the count would show it.
 */
async function countingServer(): Promise<{ url: string; opens(): number; close(): Promise<void> }> {
  let opens = 0;
  const server: Server = createServer((socket) => {
    opens++;
    socket.destroy();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    opens: () => opens,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
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
    ['both url and pool', { connectionString: 'postgres://x', pool: new pg.Pool() }],
    ['empty url', { connectionString: '' }],
    ['blank url', { connectionString: ' \n\t' }],
    ['an unknown option (a typo)', { connectionString: 'postgres://x', defaultTimeout: 5 }],
    ['options that are an array', Object.assign([], { connectionString: 'postgres://x' })],
    ['url of the wrong type', { connectionString: 5432 }],
    ['a pool that is not one', { pool: {} }],
    ['maxSessions 0', { connectionString: 'postgres://x', maxSessions: 0 }],
    ['maxSessions NaN', { connectionString: 'postgres://x', maxSessions: NaN }],
    ['maxSessions 1.5', { connectionString: 'postgres://x', maxSessions: 1.5 }],
    ['maxSessions huge', { connectionString: 'postgres://x', maxSessions: 1e9 }],
    ['keepaliveMs negative', { connectionString: 'postgres://x', keepaliveMs: -5 }],
    ['keepaliveMs Infinity', { connectionString: 'postgres://x', keepaliveMs: Infinity }],
    ['idleTimeoutMs negative', { connectionString: 'postgres://x', idleTimeoutMs: -1 }],
    ['idleTimeoutMs NaN', { connectionString: 'postgres://x', idleTimeoutMs: NaN }],
    ['idleTimeoutMs a string', { connectionString: 'postgres://x', idleTimeoutMs: '30s' }],
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
  let server: Awaited<ReturnType<typeof countingServer>>;
  beforeAll(async () => {
    server = await countingServer();
    locker = createLocker({ connectionString: server.url });
  });
  afterAll(async () => {
    await locker.close();
    await server.close();
  });

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

  it.each<[string, () => Promise<unknown>]>([
    ['acquire', () => locker.acquire('ok', { timeout: 100 } as never)],
    ['tryAcquire', () => locker.tryAcquire('ok', { fenced: true } as never)],
    ['withLock', () => locker.withLock('ok', async () => 1, { ttl: 5 } as never)],
    ['tryWithLock', () => locker.tryWithLock('ok', async () => 1, { nested: true } as never)],
    ['acquireAll', () => locker.acquireAll(['a', 'b'], { timeout: 100 } as never)],
    ['lease', () => locker.lease('ok', { ttl: 1000 } as never)],
    ['tryLease', () => locker.tryLease('ok', { owners: 'me' } as never)],
    ['withLease', () => locker.withLease('ok', async () => 1, { renewal: false } as never)],
    ['semaphore', async () => locker.semaphore('ok', { permits: 2, max: 3 } as never)],
    ['semaphore acquire', () => locker.semaphore(7n, { permits: 2 }).acquire({ timeout: 5 } as never)],
    ['semaphore tryAcquire', () => locker.semaphore(7n, { permits: 2 }).tryAcquire({ signl: undefined } as never)],
    ['semaphore withPermit', () => locker.semaphore(7n, { permits: 2 }).withPermit(async () => 1, { mode: 'shared' } as never)],
    ['leader', async () => locker.leader('ok', { ttl: 1000 } as never)],
    ['leader (allowNested is not one of its options)', async () => locker.leader('ok', { allowNested: true } as never)],
  ])('%s refuses an unknown option', async (_label, call) => {
    const err = await call().then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect((err as Error).message).toMatch(/unknown option '\w+'/);
  });

  it('an unknown option is named with the closest valid one', async () => {
    await expect(locker.acquire('ok', { timeout: 100 } as never)).rejects.toThrow(/unknown option 'timeout'; did you mean 'timeoutMs'\?/);
    await expect(locker.lease('ok', { ttl: 100 } as never)).rejects.toThrow(/did you mean 'ttlMs'\?/);
    await expect(locker.acquire('ok', { Mode: 'shared' } as never)).rejects.toThrow(/did you mean 'mode'\?/);
    // Nothing near: the valid options are listed instead.
    await expect(locker.acquire('ok', { zzzzzzzz: 1 } as never)).rejects.toThrow(/unknown option 'zzzzzzzz' \(valid: mode, timeoutMs, signal, fencing, ttlMs, allowNested\)/);
  });

  it.each<[string, unknown]>([
    ['an owner with NUL', { owner: 'me\0you' }],
    ['an owner with a lone surrogate', { owner: 'me\uD800' }],
    ['data with NUL in a value', { data: { note: 'a\u0000b' } }],
    ['data with NUL in a key', { data: { ['a\u0000']: 1 } }],
    ['data with NUL deep in an array', { data: { list: [1, ['x', 'y\u0000']] } }],
    ['data that is a string with NUL', { data: '\u0000' }],
    ['data with a lone surrogate', { data: { note: '\uDC00' } }],
  ])('lease refuses %s (PostgreSQL would refuse it later, reported as an outage)', async (_label, opts) => {
    await expect(locker.lease('ok', opts as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(locker.tryLease('ok', opts as never)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(locker.withLease('ok', async () => 1, opts as never)).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  it('workWithLock refuses an unknown option before registering a worker', async () => {
    let registered = 0;
    const boss: BossLike = {
      work: async () => {
        registered++;
        return 'worker';
      },
      fail: async () => undefined,
    };
    const ok = { key: () => 'k' };
    await expect(workWithLock(boss, locker, 'q', { ...ok, wait: 100 } as never, async () => 1)).rejects.toThrow(/did you mean 'waitMs'\?/);
    await expect(workWithLock(boss, locker, 'q', { ...ok, fence: true } as never, async () => 1)).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(registered).toBe(0);
  });

  it('touched nothing: no connection was ever offered to the server, not even in the background', async () => {
    // close() writes what the name registry still has pending: a name noted by a refused call would connect here.
    await locker.close();
    expect(server.opens()).toBe(0);
  });
});

describe('an aborted signal', () => {
  it('rejects at once with its reason', async () => {
    const server = await countingServer();
    const locker = createLocker({ connectionString: server.url });
    try {
      const reason = new Error('already aborted');
      await expect(locker.acquire('ok', { signal: AbortSignal.abort(reason) })).rejects.toBe(reason);
    } finally {
      await locker.close();
      await server.close();
    }
  });
});

describe('functions outside the locker refuse unknown options', () => {
  it('lockKey, fencingColumnSql and migrate', async () => {
    expect(() => lockKey('a', { namespac: 'x' } as never)).toThrow(/did you mean 'namespace'\?/);
    expect(() => fencingColumnSql('orders', { enforced: true } as never)).toThrow(/did you mean 'enforce'\?/);
    const server = await countingServer();
    try {
      await expect(migrate({ connectionString: server.url, pol: null } as never)).rejects.toThrow(/did you mean 'pool'\?/);
      expect(server.opens()).toBe(0);
    } finally {
      await server.close();
    }
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

  it('refuses unknown options and spec keys, and leaves the transaction clean', async () => {
    await client.query('BEGIN');
    await expect(xactLock(client, 'ok', { timeout: 100 } as never)).rejects.toThrow(/did you mean 'timeoutMs'\?/);
    await expect(tryXactLock(client, 'ok', { namespce: 'x' } as never)).rejects.toThrow(/did you mean 'namespace'\?/);
    await expect(fencedUpdate(client, { table: 't', set: { a: 1 }, where: { id: 1 }, token: 1n, colum: 'x' } as never)).rejects.toThrow(
      /did you mean 'column'\?/,
    );
    const { rows } = await client.query(`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`);
    expect(rows[0].n).toBe(0);
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
