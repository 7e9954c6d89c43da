// psql scripts (another language, through the public SQL interface) race Node lockers on one name:
// leases and fenced session locks of both sides exclude each other and draw tokens from one counter.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLocker, lockKey, type LockHandle } from '../src/index.js';
import { track, useMigratedDatabase } from './support/db.js';

let db: Awaited<ReturnType<typeof useMigratedDatabase>>;
let pool: pg.Pool;
let dir: string;

beforeAll(async () => {
  db = await useMigratedDatabase('cross_language');
  pool = new pg.Pool({ connectionString: db.url, max: 6 });
  dir = mkdtempSync(join(tmpdir(), 'pgfence-psql-'));
  await pool.query(`CREATE TABLE race_counter (n int NOT NULL);
    INSERT INTO race_counter VALUES (0);
    CREATE TABLE race_log (id bigserial PRIMARY KEY, holder text NOT NULL, token bigint NOT NULL)`);
});
afterAll(async () => {
  await pool.end();
  rmSync(dir, { recursive: true, force: true });
});

const NAME = 'race:one-name';
const ROUNDS = 12;

/**
 * A psql script taking the name ROUNDS times, as a lease or as a fenced session lock, and doing an
 * unsynchronised increment under it (read, then write in a separate statement).
 */
function psqlScript(holder: string, kind: 'lease' | 'lock'): string {
  const take =
    kind === 'lease'
      ? `SELECT pgfence.lease(pgfence.lock_key('${NAME}'), 10000, 60000, '${holder}', '${NAME}') AS tok \\gset`
      : `SELECT pgfence.lock_fenced(pgfence.lock_key('${NAME}')) AS tok \\gset`;
  const give =
    kind === 'lease'
      ? `SELECT pgfence.release_lease(pgfence.lock_key('${NAME}'), :tok) AS released \\gset`
      : `SELECT pgfence.unlock(pgfence.lock_key('${NAME}')) AS released \\gset`;
  const round = `${take}
SELECT n AS v FROM race_counter \\gset
SELECT pg_sleep(0.003);
UPDATE race_counter SET n = :v + 1;
INSERT INTO race_log (holder, token) VALUES ('${holder}', :tok);
${give}
\\if :released
\\else
  \\echo 'release refused' \\quit
\\endif
`;
  return `\\set ON_ERROR_STOP 1\nSET statement_timeout = '60s';\n${round.repeat(ROUNDS)}`;
}

function runPsql(holder: string, kind: 'lease' | 'lock'): Promise<void> {
  const file = join(dir, `${holder}.sql`);
  writeFileSync(file, psqlScript(holder, kind));
  return new Promise((resolve, reject) => {
    const proc = spawn('psql', ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', db.url, '-f', file], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    proc.stdout.on('data', (d: Buffer) => (out += d.toString()));
    proc.stderr.on('data', (d: Buffer) => (out += d.toString()));
    proc.on('error', reject);
    proc.on('close', (code) => (code === 0 && !out.includes('release refused') ? resolve() : reject(new Error(`psql ${holder} exited ${code}: ${out}`))));
  });
}

async function nodeHolder(holder: string, kind: 'lease' | 'lock'): Promise<void> {
  const locker = track(createLocker({ connectionString: db.url }));
  for (let i = 0; i < ROUNDS; i++) {
    const handle: LockHandle =
      kind === 'lease' ? await locker.lease(NAME, { ttlMs: 10_000, timeoutMs: 60_000 }) : await locker.acquire(NAME, { fencing: true, timeoutMs: 60_000 });
    const { rows } = await pool.query<{ n: number }>('SELECT n FROM race_counter');
    await pool.query('SELECT pg_sleep(0.003)'); // some work between the read and the write: a window for a race
    await pool.query('UPDATE race_counter SET n = $1', [rows[0]!.n + 1]);
    await pool.query('INSERT INTO race_log (holder, token) VALUES ($1, $2)', [holder, handle.token]);
    expect(await handle.release()).toBe(true);
  }
}

describe('psql and Node on one name', () => {
  it('leases and fenced session locks of psql and Node: no lost increment, tokens strictly increase in order of work', async () => {
    const holders: [string, 'lease' | 'lock', 'psql' | 'node'][] = [
      ['psql-lease-1', 'lease', 'psql'],
      ['psql-lease-2', 'lease', 'psql'],
      ['psql-lock-1', 'lock', 'psql'],
      ['psql-lock-2', 'lock', 'psql'],
      ['node-lease-1', 'lease', 'node'],
      ['node-lease-2', 'lease', 'node'],
      ['node-lock-1', 'lock', 'node'],
    ];
    await Promise.all(holders.map(([h, kind, side]) => (side === 'psql' ? runPsql(h, kind) : nodeHolder(h, kind))));

    const { rows: counter } = await pool.query<{ n: number }>('SELECT n FROM race_counter');
    expect(counter[0]!.n).toBe(holders.length * ROUNDS);
    const { rows: log } = await pool.query<{ holder: string; token: string }>('SELECT holder, token::text FROM race_log ORDER BY id');
    expect(log).toHaveLength(holders.length * ROUNDS);
    // One counter for every kind and side: each grant's token is above every earlier grant's.
    const tokens = log.map((r) => BigInt(r.token));
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]! > tokens[i - 1]!, `grant ${i}: ${tokens[i - 1]} then ${tokens[i]}`).toBe(true);
    for (const [h] of holders) expect(log.filter((r) => r.holder === h)).toHaveLength(ROUNDS);
    // The counter the Node API sees is the one psql drew from.
    const { rows: last } = await pool.query<{ token: string }>('SELECT token::text FROM pgfence.fencing_tokens WHERE key = $1', [lockKey(NAME)]);
    expect(BigInt(last[0]!.token)).toBe(tokens.at(-1));
  }, 120_000);
});
