// The public SQL interface (sql/interface.sql): keys, leases, fenced locks and at-least-for holds,
// called as another language would, against the same tables and counters as the Node API.
import { readFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError, lockKey } from '../src/index.js';
import { NOTIFY_CHANNEL } from '../src/session/session-sql.js';
import { eventually } from './support/db.js';
import { useSqlDatabase } from './support/sql-database.js';

const db = useSqlDatabase('sql_interface');
const { one, open } = db;

/** A random name of 1..maxChars characters from ASCII, Latin-1, CJK and astral planes. */
function randomName(maxChars: number): string {
  const pools = [
    [0x20, 0x7e],
    [0xa0, 0x24f],
    [0x3040, 0x30ff],
    [0x4e00, 0x9fff],
    [0x1f300, 0x1f64f],
  ] as const;
  const length = 1 + randomBytes(2).readUInt16BE() % maxChars;
  let s = '';
  for (let i = 0; i < length; i++) {
    const [lo, hi] = pools[randomBytes(1)[0]! % pools.length]!;
    s += String.fromCodePoint(lo + (randomBytes(4).readUInt32BE() % (hi - lo + 1)));
  }
  return s;
}

describe('pgfence.lock_key', () => {
  it('gives every published vector (test/vectors/keys.json)', async () => {
    const { vectors } = JSON.parse(readFileSync(new URL('./vectors/keys.json', import.meta.url), 'utf8')) as {
      vectors: { name: string; namespace?: string; key: string }[];
    };
    expect(vectors.length).toBeGreaterThan(5);
    for (const v of vectors) {
      const { key } = await one<{ key: string }>('SELECT pgfence.lock_key($1, $2)::text AS key', [v.name, v.namespace ?? null]);
      expect(key, `${v.namespace ?? ''}/${v.name}`).toBe(v.key);
    }
  });

  it('agrees with lockKey on 300 random names, with and without a namespace, of every block length', async () => {
    const names: string[] = [];
    const namespaces: (string | null)[] = [];
    for (let i = 0; i < 300; i++) {
      // Lengths 1..40 cover every tail length (0..15) and several blocks; some long ones up to 1024 bytes.
      let name = randomName(i % 10 === 0 ? 250 : 40);
      while (Buffer.byteLength(name) > 1024) name = name.slice(0, -1);
      names.push(name);
      namespaces.push(i % 3 === 0 ? randomName(12) : null);
    }
    const { rows } = await db.pool.query<{ key: string }>(
      'SELECT pgfence.lock_key(n, ns)::text AS key FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS t(n, ns, i) ORDER BY i',
      [names, namespaces],
    );
    rows.forEach((r, i) => {
      const expected = namespaces[i] === null ? lockKey(names[i]!) : lockKey(names[i]!, { namespace: namespaces[i]! });
      expect(r.key, JSON.stringify([namespaces[i], names[i]])).toBe(expected.toString());
    });
  });

  it('refuses the names Node refuses (empty, over 1024 bytes) with 22023', async () => {
    for (const bad of ['', 'x'.repeat(1025), 'é'.repeat(513)]) {
      await expect(db.pool.query('SELECT pgfence.lock_key($1)', [bad])).rejects.toMatchObject({ code: '22023' });
      expect(() => lockKey(bad)).toThrow(InvalidArgumentError);
    }
    await expect(db.pool.query("SELECT pgfence.lock_key('a', '')")).rejects.toMatchObject({ code: '22023' });
    expect((await one<{ v: number }>('SELECT pgfence.interface_version() AS v')).v).toBe(2);
  });
});

describe('leases and fenced locks through SQL and Node exclude each other and share one token counter', () => {
  it('leases: SQL and Node take turns, tokens increase', async () => {
    const locker = open();
    const key = lockKey('sql:lease');
    const a = await one<{ granted: boolean; token: string }>(
      "SELECT granted, token::text FROM pgfence.try_lease($1, 5000, 'psql-a', 'sql:lease')",
      [key],
    );
    expect(a.granted).toBe(true);
    expect(await locker.tryLease('sql:lease')).toBeNull();
    expect((await one<{ t: string | null }>('SELECT pgfence.try_lock_fenced($1)::text AS t', [key])).t).toBeNull();
    expect((await one<{ e: Date | null }>('SELECT pgfence.renew_lease($1, $2, 5000) AS e', [key, a.token])).e).not.toBeNull();
    expect((await one<{ r: boolean }>('SELECT pgfence.release_lease($1, $2) AS r', [key, a.token])).r).toBe(true);

    const b = (await locker.tryLease('sql:lease'))!;
    expect(b.token).toBe(BigInt(a.token) + 1n);
    const busy = await one<{ granted: boolean; token: string; owner: string }>('SELECT granted, token::text, owner FROM pgfence.try_lease($1, 5000)', [key]);
    expect(busy, 'a busy answer names the holder, never its token').toMatchObject({ granted: false, token: null, owner: b.owner });
    expect((await one<{ r: boolean }>('SELECT pgfence.release_lease($1, $2) AS r', [key, a.token])).r).toBe(false); // an old token frees nothing
    await b.release();

    const c = await one<{ t: string }>('SELECT pgfence.lease($1, 5000, 1000)::text AS t', [key]);
    expect(BigInt(c.t)).toBe(b.token + 1n);
  });

  it('session locks: a lock taken in SQL keeps Node out (lock and lease), and its unlock wakes a Node waiter', async () => {
    const locker = open();
    const key = lockKey('sql:session');
    const client = await db.pool.connect();
    try {
      const t1 = BigInt((await client.query('SELECT pgfence.lock_fenced($1)::text AS t', [key])).rows[0].t);
      expect(await locker.tryAcquire('sql:session')).toBeNull();
      expect(await locker.tryLease('sql:session')).toBeNull();
      const waiting = locker.acquire('sql:session', { timeoutMs: 20_000, fencing: true });
      await eventually(() => locker.stats().waiting === 1);
      expect((await client.query('SELECT pgfence.unlock($1) AS u', [key])).rows[0].u).toBe(true);
      const h = await waiting;
      expect(h.token).toBe(t1 + 1n);
      // Held by Node: SQL tries fail, and a session lock of SQL waits (bounded here) for it.
      expect((await client.query('SELECT pgfence.try_lock_fenced($1)::text AS t', [key])).rows[0].t).toBeNull();
      expect((await client.query('SELECT pgfence.try_xact_lock_fenced($1)::text AS t', [key])).rows[0].t).toBeNull();
      await h.release();
      const t3 = (await client.query('SELECT pgfence.try_lock_fenced($1)::text AS t', [key])).rows[0].t;
      expect(BigInt(t3)).toBe(h.token! + 1n);
      expect((await client.query('SELECT pgfence.unlock($1) AS u', [key])).rows[0].u).toBe(true);
      expect((await client.query('SELECT pgfence.unlock($1) AS u', [key])).rows[0].u).toBe(false);
      await client.query('BEGIN');
      const t4 = (await client.query('SELECT pgfence.xact_lock_fenced($1)::text AS t', [key])).rows[0].t;
      expect(BigInt(t4)).toBe(BigInt(t3) + 1n);
      expect(await locker.tryAcquire('sql:session')).toBeNull();
      await client.query('COMMIT');
      const h5 = (await locker.tryAcquire('sql:session', { fencing: true }))!;
      expect(h5.token).toBe(BigInt(t4) + 1n);
      await h5.release();
    } finally {
      client.release();
    }
  });

  it('unlock and release_lease of SQL wake the waiters other sessions announced (NOTIFY), as Node releases do', async () => {
    const key = lockKey('sql:wake');
    const listener = await db.pool.connect();
    const marker = await db.pool.connect();
    const other = await db.pool.connect(); // the SQL client: a session lock is unlocked on the session that took it
    const heard: string[] = [];
    try {
      listener.on('notification', (n) => heard.push(n.payload!));
      await listener.query(`LISTEN ${NOTIFY_CHANNEL}`);
      // Announce a waiter of another session, as a waiting Node locker does (its marker lock).
      await marker.query('SELECT pg_advisory_lock_shared(($1::int8 >> 32)::int4, (($1::int8 & 4294967295) - (($1::int8 & 2147483648) << 1))::int4)', [key]);
      expect((await other.query('SELECT pgfence.try_lock_fenced($1) IS NOT NULL AS got', [key])).rows[0].got).toBe(true);
      expect((await other.query('SELECT pgfence.unlock($1) AS u', [key])).rows[0].u).toBe(true);
      await eventually(() => heard.length === 1, 5000, 'the unlock to notify');
      const { token } = await one<{ token: string }>('SELECT token::text FROM pgfence.try_lease($1, 5000, $2)', [key, 'sql']);
      expect(await one('SELECT pgfence.release_lease($1, $2) AS r', [key, token])).toEqual({ r: true });
      await eventually(() => heard.length === 2, 5000, 'the release to notify');
      expect(heard).toEqual([key.toString(), key.toString()]);
    } finally {
      await listener.query(`UNLISTEN ${NOTIFY_CHANNEL}`);
      listener.release();
      marker.release(true);
      other.release();
    }
  });

  it('a session lock of SQL waits out a live lease of Node instead of taking the name', async () => {
    const locker = open();
    const key = lockKey('sql:waits-lease');
    const lease = await locker.lease('sql:waits-lease', { ttlMs: 5000 });
    const client = await db.pool.connect();
    try {
      const taking = client.query('SELECT pgfence.lock_fenced($1)::text AS t', [key]);
      let taken = false;
      void taking.then(() => (taken = true));
      // It polls while the lease lives: the lease is still held and renewable meanwhile.
      expect(await lease.renew()).toBe(true);
      expect(taken).toBe(false);
      await lease.release();
      expect(BigInt((await taking).rows[0].t)).toBe(lease.token + 1n);
      await client.query('SELECT pgfence.unlock($1)', [key]);
    } finally {
      client.release();
    }
  });

  it('refuses bad arguments (22023) and NULL ones (22004) before touching anything (more: sql-arguments.test.ts)', async () => {
    await expect(db.pool.query('SELECT * FROM pgfence.try_lease(1, 50)')).rejects.toMatchObject({ code: '22023' });
    await expect(db.pool.query('SELECT * FROM pgfence.try_lease(NULL, 500)')).rejects.toMatchObject({ code: '22004' });
    await expect(db.pool.query('SELECT pgfence.release_lease(1, 1, -1)')).rejects.toMatchObject({ code: '22023' });
  });
});

describe('at-least-for holds (minHoldMs) on the database clock', () => {
  it('release keeps the lease until acquired_at + minHoldMs; others are refused until then', async () => {
    const a = open();
    const b = open();
    const key = lockKey('hold:job');
    const l = await a.lease('hold:job', { ttlMs: 10_000, minHoldMs: 1500 });
    expect(await l.release()).toBe(true);
    const r = await one<{ held_for_ms: string; released: boolean; live: boolean; hold_end: Date }>(
      `SELECT extract(epoch FROM held_until - acquired_at) * 1000 AS held_for_ms, released_at IS NOT NULL AS released,
              pgfence.lease_live(l, clock_timestamp()) AS live, pgfence.lease_live_until(l) AS hold_end
         FROM pgfence.leases l WHERE key = $1`,
      [key],
    );
    expect(Number(r.held_for_ms)).toBe(1500);
    expect(r.released).toBe(true);
    if (r.live) expect(await b.tryLease('hold:job')).toBeNull();
    const waited = await b.lease('hold:job', { timeoutMs: 20_000 });
    expect(waited.token).toBe(l.token + 1n);
    // Taken no earlier than the hold's end, on the database clock (compared in the database, to the microsecond).
    const { after } = await one<{ after: boolean }>(
      `SELECT l.acquired_at >= h.hold_end AS after
         FROM pgfence.leases l, (SELECT $2::text::timestamptz AS hold_end) h WHERE l.key = $1`,
      [key, await one<{ t: string }>('SELECT $1::timestamptz::text AS t', [r.hold_end]).then((x) => x.t)],
    );
    expect(after).toBe(true);
    await waited.release();
  });

  it('a hold already over when the lease is released frees it at once; a hold longer than the TTL outlives it', async () => {
    const a = open();
    const key = lockKey('hold:past');
    const l = await a.lease('hold:past', { ttlMs: 1000, minHoldMs: 1 });
    await eventually(async () => (await one<{ over: boolean }>('SELECT acquired_at + interval \'1 ms\' < clock_timestamp() AS over FROM pgfence.leases WHERE key = $1', [key])).over);
    expect(await l.release()).toBe(true);
    expect((await one<{ released: boolean }>('SELECT released_at IS NOT NULL AS released FROM pgfence.leases WHERE key = $1', [key])).released).toBe(true);

    const long = await a.lease('hold:past', { ttlMs: 200, renew: false, minHoldMs: 60_000 });
    expect(await long.release()).toBe(true);
    const r = await one<{ held_for_ms: string }>(
      'SELECT extract(epoch FROM pgfence.lease_live_until(l) - acquired_at) * 1000 AS held_for_ms FROM pgfence.leases l WHERE key = $1',
      [key],
    );
    expect(Number(r.held_for_ms)).toBe(60_000);
    expect(await open().tryLease('hold:past')).toBeNull();
  });

  it('a kept release NOTIFYs nobody (no busy wake-ups); a release that frees the lease does', async () => {
    const a = open();
    const key = lockKey('hold:notify');
    const listener = await db.pool.connect();
    const marker = await db.pool.connect();
    const heard: string[] = [];
    try {
      listener.on('notification', (n) => heard.push(n.payload!));
      await listener.query(`LISTEN ${NOTIFY_CHANNEL}`);
      // Announce a waiter of another session, as a waiting Node locker does (its marker lock).
      await marker.query('SELECT pg_advisory_lock_shared(($1::int8 >> 32)::int4, (($1::int8 & 4294967295) - (($1::int8 & 2147483648) << 1))::int4)', [key]);
      const kept = await a.lease('hold:notify', { minHoldMs: 60_000 });
      expect(await kept.release()).toBe(true);
      // A sentinel committed after the release: the queue delivers in commit order, so once it is
      // heard, any NOTIFY of the release would have been heard before it.
      await db.pool.query(`SELECT pg_notify('${NOTIFY_CHANNEL}', 'sentinel')`);
      await eventually(() => heard.includes('sentinel'));
      expect(heard).toEqual(['sentinel']);
      await db.pool.query('UPDATE pgfence.leases SET expires_at = clock_timestamp(), held_until = clock_timestamp() WHERE key = $1', [key]); // end the hold
      const freed = await a.lease('hold:notify');
      expect(await freed.release()).toBe(true);
      await eventually(() => heard.length > 1);
      expect(heard).toEqual(['sentinel', key.toString()]);
    } finally {
      await listener.query(`UNLISTEN ${NOTIFY_CHANNEL}`);
      listener.release();
      marker.release(true);
    }
  });

  it('minHoldMs is validated before any I/O, and leader() refuses it', async () => {
    const a = open();
    await expect(a.lease('hold:bad', { minHoldMs: -1 })).rejects.toThrow(InvalidArgumentError);
    await expect(a.lease('hold:bad', { minHoldMs: 1.5 })).rejects.toThrow(InvalidArgumentError);
    await expect(a.lease('hold:bad', { minHoldMs: '5s' as unknown as number })).rejects.toThrow(InvalidArgumentError);
    expect(() => a.leader('hold:bad', { minHoldMs: 5 } as never)).toThrow(InvalidArgumentError);
  });
});
