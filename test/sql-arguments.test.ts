// Arguments of the public SQL interface (sql/interface.sql, checked by sql/arguments.sql): every public
// function refuses NULL with 22004 and a bad value with 22023, naming the argument, before anything is
// written; and the bounds are the Node API's, shown by running the same values through both.
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLocker, InvalidArgumentError, lockKey } from '../src/index.js';
import { MAX_DURATION_MS } from '../src/options.js';
import { track, useMigratedDatabase } from './support/db.js';

let db: Awaited<ReturnType<typeof useMigratedDatabase>>;
let pool: pg.Pool;

beforeAll(async () => {
  db = await useMigratedDatabase('sql_arguments');
  pool = new pg.Pool({ connectionString: db.url, max: 4 });
});
afterAll(async () => {
  await pool.end();
});

/** The SQLSTATE and message of a call, or 'ok'. Run in a transaction that is rolled back. */
async function outcome(text: string, values: unknown[] = []): Promise<{ code: string; message: string }> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query(text, values);
    return { code: 'ok', message: '' };
  } catch (err) {
    const e = err as { code?: string; message: string };
    return { code: e.code ?? '?', message: e.message };
  } finally {
    await client.query('ROLLBACK').catch(() => {});
    client.release();
  }
}

/** What a key left behind: its token counter, its lease row, advisory locks on it anywhere. */
async function traces(key: bigint): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    `SELECT (SELECT count(*) FROM pgfence.fencing_tokens WHERE key = $1)
          + (SELECT count(*) FROM pgfence.leases WHERE key = $1)
          + (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1
                AND ((classid::int8 << 32) | objid::int8) = $1) AS n`,
    [key],
  );
  return Number(rows[0]!.n);
}

/** Each public function with a call whose arguments are all valid, by name: `$1` is a fresh key. */
const validCalls: Record<string, { sql: string; args: string[]; optional?: string[] }> = {
  interface_version: { sql: 'pgfence.interface_version()', args: [] },
  lock_key: { sql: 'pgfence.lock_key(%name, %namespace)', args: ["'a name'", "'ns'"], optional: ['namespace'] },
  try_lease: {
    sql: 'pgfence.try_lease(%key, %ttl_ms, %owner, %name, %data)',
    args: ['$1', '5000', "'me'", "'a name'", `'{"a":1}'::jsonb`],
    optional: ['owner', 'name', 'data'],
  },
  lease: {
    sql: 'pgfence.lease(%key, %ttl_ms, %timeout_ms, %owner, %name, %data)',
    args: ['$1', '5000', '1000', "'me'", "'a name'", `'{"a":1}'::jsonb`],
    optional: ['timeout_ms', 'owner', 'name', 'data'],
  },
  renew_lease: { sql: 'pgfence.renew_lease(%key, %token, %ttl_ms)', args: ['$1', '7', '5000'] },
  release_lease: { sql: 'pgfence.release_lease(%key, %token, %min_hold_ms)', args: ['$1', '7', '0'] },
  try_lock_fenced: { sql: 'pgfence.try_lock_fenced(%key)', args: ['$1'] },
  lock_fenced: { sql: 'pgfence.lock_fenced(%key)', args: ['$1'] },
  unlock: { sql: 'pgfence.unlock(%key)', args: ['$1'] },
  try_xact_lock_fenced: { sql: 'pgfence.try_xact_lock_fenced(%key)', args: ['$1'] },
  xact_lock_fenced: { sql: 'pgfence.xact_lock_fenced(%key)', args: ['$1'] },
};

/** The call with argument `which` replaced by `value` (the others valid). */
function callWith(name: string, which: string | null, value: string): string {
  const { sql, args } = validCalls[name]!;
  let i = 0;
  return `SELECT * FROM ${sql.replace(/%(\w+)/g, (_, p: string) => {
    const valid = args[i++]!;
    return p === which ? value : valid;
  })}`;
}

/** A call's text and its values: the key as $1 when the call still has it. */
const withKey = (text: string, key: bigint): [string, unknown[]] => [text, text.includes('$1') ? [key] : []];

describe('NULL arguments of the SQL interface', () => {
  it('the table of calls covers every public function of sql/interface.sql, with its parameters', async () => {
    const text = readFileSync(new URL('../sql/interface.sql', import.meta.url), 'utf8');
    const publicNames = [...text.matchAll(/-- public:[^]*?CREATE OR REPLACE FUNCTION pgfence\.(\w+)\(/g)].map((m) => m[1]!);
    expect(new Set(publicNames)).toEqual(new Set(Object.keys(validCalls)));
    const { rows } = await pool.query<{ name: string; params: string[] | null }>(
      `SELECT p.proname AS name, p.proargnames AS params FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'pgfence' AND p.proname = ANY($1)`,
      [publicNames],
    );
    expect(rows.length, 'one function per public name (no stale overload)').toBe(publicNames.length);
    for (const r of rows) {
      const inputs = (r.params ?? []).slice(0, validCalls[r.name]!.args.length).map((p) => p.replace(/^p_/, ''));
      expect(inputs, r.name).toEqual([...validCalls[r.name]!.sql.matchAll(/%(\w+)/g)].map((m) => m[1]));
    }
  });

  for (const [name, call] of Object.entries(validCalls)) {
    const params = [...call.sql.matchAll(/%(\w+)/g)].map((m) => m[1]!);
    for (const param of params.filter((p) => !call.optional?.includes(p))) {
      it(`${name}(${param} => NULL) raises 22004 naming ${param}, and leaves nothing behind`, async () => {
        const key = lockKey(`null:${name}:${param}`);
        const client = await pool.connect();
        try {
          // Autocommit: whatever the call wrote or took would stay.
          const failure = await client.query(...withKey(callWith(name, param, 'NULL'), key)).then(
            () => ({ code: 'ok', message: '' }),
            (err: { code?: string; message: string }) => err,
          );
          expect(failure.code, failure.message).toBe('22004');
          expect(failure.message).toContain(`${param} must not be NULL`);
          expect(await traces(key)).toBe(0);
        } finally {
          client.release(true);
        }
      });
    }
  }

  it('optional arguments take NULL: a namespace, an owner, a name, data, a wait without bound', async () => {
    const key = lockKey('null:optional');
    expect((await outcome(callWith('lock_key', 'namespace', 'NULL'))).code).toBe('ok');
    for (const p of ['owner', 'name', 'data']) expect((await outcome(...withKey(callWith('try_lease', p, 'NULL'), key))).code, p).toBe('ok');
    expect((await outcome(...withKey(callWith('lease', 'timeout_ms', 'NULL'), key))).code).toBe('ok');
  });
});

describe('bad values: 22023 naming the argument, before anything is written', () => {
  const cases: [string, string, string, string][] = [
    ['try_lease', 'ttl_ms', '99', 'ttl_ms'],
    ['try_lease', 'ttl_ms', String(MAX_DURATION_MS + 1), 'ttl_ms'],
    ['try_lease', 'ttl_ms', '100000000000000', 'ttl_ms'], // the year 5195 once
    ['try_lease', 'owner', "''", 'owner'],
    ['try_lease', 'owner', `repeat('x', 201)`, 'owner'],
    ['try_lease', 'name', "''", 'name'],
    ['try_lease', 'name', `repeat('é', 513)`, 'name'],
    ['lease', 'ttl_ms', '99', 'ttl_ms'],
    ['lease', 'timeout_ms', '-1', 'timeout_ms'],
    ['lease', 'owner', "''", 'owner'],
    ['renew_lease', 'ttl_ms', String(MAX_DURATION_MS + 1), 'ttl_ms'],
    ['renew_lease', 'token', '0', 'token'],
    ['release_lease', 'min_hold_ms', '-1', 'min_hold_ms'],
    ['release_lease', 'min_hold_ms', String(MAX_DURATION_MS + 1), 'min_hold_ms'],
    ['release_lease', 'token', '-5', 'token'],
    ['lock_key', 'name', "''", 'name'],
    ['lock_key', 'namespace', "''", 'namespace'],
  ];
  for (const [name, param, value, named] of cases) {
    it(`${name}(${param} => ${value.slice(0, 30)})`, async () => {
      const key = lockKey(`bad:${name}:${param}:${value}`);
      const client = await pool.connect();
      try {
        const failure = await client.query(...withKey(callWith(name, param, value), key)).then(
          () => ({ code: 'ok', message: '' }),
          (err: { code?: string; message: string }) => err,
        );
        expect(failure.code, failure.message).toBe('22023');
        expect(failure.message).toMatch(new RegExp(`^pgfence: ${named} `));
        expect(await traces(key)).toBe(0);
      } finally {
        client.release(true);
      }
    });
  }
});

describe('Node and SQL refuse the same values', () => {
  it('lease TTL, owner and name bounds agree value for value', async () => {
    const locker = track(createLocker({ connectionString: db.url }));
    const ttls = [0, 99, 100, 101, MAX_DURATION_MS - 1, MAX_DURATION_MS, MAX_DURATION_MS + 1, 1e14];
    const owners = ['', 'x', 'x'.repeat(199), 'x'.repeat(200), 'x'.repeat(201), '😀'.repeat(100), '😀'.repeat(101), 'é'.repeat(200), `${'😀'.repeat(99)}xx`, `${'😀'.repeat(99)}xxx`];
    const names = ['a', 'x'.repeat(1024), 'x'.repeat(1025), 'é'.repeat(512), 'é'.repeat(513), '😀'.repeat(256), `${'😀'.repeat(256)}x`];
    let n = 0;
    const agree = async (what: string, nodeOptions: { ttlMs?: number; owner?: string }, name: string, ttlMs: number, owner: string) => {
      const viaNode = await locker.tryLease(name, nodeOptions).then(
        async (h) => {
          await h?.release();
          return 'ok';
        },
        (err: unknown) => (err instanceof InvalidArgumentError ? 'refused' : `error ${(err as Error).message}`),
      );
      const sql = await outcome('SELECT * FROM pgfence.try_lease(pgfence.lock_key($1), $2, $3, $1)', [name, ttlMs, owner]);
      const viaSql = sql.code === 'ok' ? 'ok' : sql.code === '22023' ? 'refused' : `error ${sql.code} ${sql.message}`;
      expect(viaSql, `${what}: Node ${viaNode}, SQL ${viaSql}`).toBe(viaNode);
      n++;
    };
    for (const ttlMs of ttls) await agree(`ttlMs ${ttlMs}`, { ttlMs }, 'agree:ttl', ttlMs, 'me');
    for (const owner of owners) await agree(`owner of ${owner.length} code units`, { owner }, 'agree:owner', 5000, owner);
    for (const name of names) await agree(`name of ${Buffer.byteLength(name)} bytes`, {}, name, 5000, 'me');
    expect(n).toBe(ttls.length + owners.length + names.length);
  });

  it('minHoldMs and the release bound agree', async () => {
    const locker = track(createLocker({ connectionString: db.url }));
    for (const minHoldMs of [-1, 0, 1, MAX_DURATION_MS, MAX_DURATION_MS + 1]) {
      const viaNode = await locker.tryLease('agree:hold', { minHoldMs, ttlMs: 1000 }).then(
        async (h) => {
          await h?.release();
          await pool.query("UPDATE pgfence.leases SET expires_at = clock_timestamp(), held_until = NULL WHERE key = pgfence.lock_key('agree:hold')");
          return 'ok';
        },
        (err: unknown) => (err instanceof InvalidArgumentError ? 'refused' : `error ${(err as Error).message}`),
      );
      const sql = await outcome('SELECT pgfence.release_lease(1, 1, $1)', [minHoldMs]);
      expect(sql.code === 'ok' ? 'ok' : sql.code === '22023' ? 'refused' : sql.code, `minHoldMs ${minHoldMs}`).toBe(viaNode);
    }
  });
});
