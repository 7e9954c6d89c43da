// One name, three languages, both kinds: Node lockers, Python processes (psycopg) and psql loops take
// `race:one-name` as a lease or a fenced session lock through the same tokens, and increment a shared
// counter under it (a read, then a write). One Python holder is SIGKILLed while it holds the name and
// one is SIGSTOPped past its lease, then SIGCONTed: its write must be refused.
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLocker, lockKey, type LockHandle } from '../src/index.js';
import { capabilityMissing } from './support/capability.js';
import { probeClient, SYSTEM_PYTHON } from './support/clients.js';
import { eventually, sleep, track, useMigratedDatabase } from './support/db.js';
import { childEnv, type Finished, startProcess } from './support/process.js';

const skip = capabilityMissing('CROSS-LANGUAGE RACE', probeClient('python').unavailable ?? probeClient('psql').unavailable);

const NAME = 'race:one-name';
const KEY = lockKey(NAME).toString();
const ROUNDS = 8;
/** Each holder pauses up to this long between a release and its next request, so that the kinds take turns. */
const THINK_MS = 60;
const HOLDER = fileURLToPath(new URL('fixtures/race-holder.py', import.meta.url));

/**
 * The increment's write, the one statement every side runs: it writes only with a token not older
 * than the counter's (the fencing guard), and logs the increment in the same statement, so the log
 * is exactly the increments that were applied.
 */
const WRITE = `WITH w AS (UPDATE race_counter SET n = {v}::int + 1, fencing_token = {tok}::bigint
                 WHERE id = 1 AND fencing_token <= {tok}::bigint RETURNING n)
INSERT INTO race_log (holder, token, n) SELECT {holder}::text, {tok}::bigint, n FROM w RETURNING n`;
const writeIn = (names: { v: string; tok: string; holder: string }) =>
  WRITE.replaceAll('{v}', names.v).replaceAll('{tok}', names.tok).replaceAll('{holder}', names.holder);

let db: Awaited<ReturnType<typeof useMigratedDatabase>>;
let pool: pg.Pool;

beforeAll(async () => {
  if (skip) return;
  db = await useMigratedDatabase('cross_language');
  pool = new pg.Pool({ connectionString: db.url, max: 6 });
  await pool.query(`CREATE TABLE race_counter (id int PRIMARY KEY, n int NOT NULL, fencing_token bigint NOT NULL);
    INSERT INTO race_counter VALUES (1, 0, 0);
    CREATE TABLE race_log (id bigserial PRIMARY KEY, holder text NOT NULL, token bigint NOT NULL, n int NOT NULL)`);
});
afterAll(async () => {
  await pool?.end();
});

type Kind = 'lease' | 'lock';
/** What a looping holder reports: the increments it saw acknowledged. */
interface Looped {
  holder: string;
  acks: number;
}

/** A psql script taking the name ROUNDS times and incrementing under it; any refusal stops it with an error. */
function psqlScript(kind: Kind): string {
  const take =
    kind === 'lease'
      ? `SELECT pgfence.lease(p_key => :key, p_ttl_ms => 10000, p_timeout_ms => 60000, p_owner => :'holder', p_name => '${NAME}') AS tok \\gset`
      : `SELECT pgfence.lock_fenced(:key) AS tok \\gset`;
  const give = kind === 'lease' ? `SELECT pgfence.release_lease(:key, :tok) AS released \\gset` : `SELECT pgfence.unlock(:key) AS released \\gset`;
  // A write that logs no row fails its \gset: psql stops there (ON_ERROR_STOP) and exits non-zero.
  const round = `${take}
\\echo token :tok
SELECT n AS v FROM race_counter WHERE id = 1 \\gset
SELECT pg_sleep(0.003) \\gset
${writeIn({ v: ':v', tok: ':tok', holder: ":'holder'" })} \\gset
\\echo ack :tok :n
${give}
\\if :released
\\else
  \\echo 'release refused'
  SELECT 1/0;
\\endif
SELECT pg_sleep(random() * ${THINK_MS / 1000}) \\gset
`;
  return `\\set ON_ERROR_STOP 1\nSET statement_timeout = '60s';\nSELECT pgfence.lock_key('${NAME}') AS key \\gset\n${round.repeat(ROUNDS)}`;
}

const acksIn = (r: Finished) => r.stdout.match(/^ack \d+ \d+$/gm)?.length ?? 0;

function checked(holder: string, r: Finished): Looped {
  if (r.code !== 0) throw new Error(`${holder} exited ${r.code ?? r.signal}:\n${r.stdout}${r.stderr}`);
  return { holder, acks: acksIn(r) };
}

async function psqlHolder(holder: string, kind: Kind): Promise<Looped> {
  const p = startProcess('psql', ['-X', '-q', '-v', `holder=${holder}`, '-d', db.url], { env: childEnv({}), timeoutMs: 90_000, stdin: true });
  p.proc.stdin!.end(psqlScript(kind));
  return checked(holder, await p.done);
}

function pythonHolder(holder: string, kind: Kind, rounds: number, ttlMs: number, gate = false) {
  return startProcess(SYSTEM_PYTHON, [HOLDER, holder, kind, String(rounds), String(ttlMs), ...(gate ? ['gate'] : [])], {
    env: childEnv({ DATABASE_URL: db.url, RACE_THINK_MS: String(THINK_MS), RACE_WRITE: writeIn({ v: '%(v)s', tok: '%(tok)s', holder: '%(holder)s' }) }),
    timeoutMs: 90_000,
    stdin: gate,
  });
}

async function nodeHolder(holder: string, kind: Kind): Promise<Looped> {
  const locker = track(createLocker({ connectionString: db.url }));
  const write = writeIn({ v: '$1', tok: '$2', holder: '$3' });
  let acks = 0;
  for (let i = 0; i < ROUNDS; i++) {
    const handle: LockHandle =
      kind === 'lease' ? await locker.lease(NAME, { ttlMs: 10_000, timeoutMs: 60_000 }) : await locker.acquire(NAME, { fencing: true, timeoutMs: 60_000 });
    const { rows } = await pool.query<{ n: number }>('SELECT n FROM race_counter WHERE id = 1');
    await pool.query('SELECT pg_sleep(0.003)'); // some work between the read and the write: a window for a race
    const written = await pool.query(write, [rows[0]!.n, handle.token, holder]);
    if (written.rowCount !== 1) throw new Error(`${holder}: its write with token ${handle.token} was refused`);
    acks++;
    if (!(await handle.release())) throw new Error(`${holder}: release refused`);
    await sleep(Math.random() * THINK_MS);
  }
  return { holder, acks };
}

describe.skipIf(skip)('Node, Python and psql on one name', () => {
  it('leases and fenced session locks of every side: counter exact, tokens strictly increasing; a killed holder is replaced; a paused holder past its lease is refused', async () => {
    // A Python lease holder (a 3 s lease) reads the counter, then is stopped there.
    const stopped = pythonHolder('py-stopped', 'lease', 1, 3000, true);
    const stoppedToken = BigInt((await stopped.line(/^holding (\d+) \d+$/))[1]!);
    stopped.proc.kill('SIGSTOP');
    const { rows: lease } = await pool.query<{ until: string }>(
      'SELECT (extract(epoch FROM expires_at) * 1000000)::bigint::text AS until FROM pgfence.leases WHERE key = $1 AND token = $2',
      [KEY, stoppedToken],
    );

    // A Python session-lock holder gets the name once that lease has expired; it will die holding it.
    const killed = pythonHolder('py-killed', 'lock', 1, 0, true);
    const holding = await killed.line(/^holding (\d+) (\d+)$/);
    const killedToken = BigInt(holding[1]!);
    expect(killedToken > stoppedToken).toBe(true);
    // Not before: the database clock just after its grant is past the expiry of that lease.
    expect(BigInt(holding[2]!) >= BigInt(lease[0]!.until), `session lock granted by ${holding[2]} µs, lease until ${lease[0]!.until} µs`).toBe(true);

    // The race: every side, both kinds, all waiting for the killed holder.
    const python = (holder: string, kind: Kind) => pythonHolder(holder, kind, ROUNDS, 10_000).done.then((r) => checked(holder, r));
    const loopers = [
      nodeHolder('node-lease', 'lease'),
      nodeHolder('node-lock', 'lock'),
      python('py-lease', 'lease'),
      python('py-lock', 'lock'),
      psqlHolder('psql-lease', 'lease'),
      psqlHolder('psql-lock', 'lock'),
    ];
    const race = Promise.allSettled(loopers);
    // The session lockers (one per side) queue in PostgreSQL behind the holder about to be killed.
    await eventually(
      async () =>
        (await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`))
          .rows[0]!.n >= 3,
      30_000,
      'three session lockers waiting',
    );
    killed.proc.kill('SIGKILL');
    expect((await killed.done).signal).toBe('SIGKILL');

    // Once someone newer has written, the paused holder wakes up and writes with its old token.
    await eventually(async () => (await pool.query('SELECT 1 FROM race_log WHERE token > $1', [stoppedToken])).rowCount! > 0, 30_000, 'a newer holder wrote');
    stopped.proc.stdin!.write('go\n');
    stopped.proc.kill('SIGCONT');
    const paused = await stopped.done;
    expect(paused.code, paused.stdout + paused.stderr).toBe(0);
    expect(paused.stdout).toContain(`refused ${stoppedToken}\nreleased false\n`);

    const results = await race;
    const failures = results.flatMap((r) => (r.status === 'rejected' ? [String(r.reason)] : []));
    expect(failures).toEqual([]);
    const looped = results.map((r) => (r as PromiseFulfilledResult<Looped>).value);

    const { rows: log } = await pool.query<{ holder: string; token: string; n: number }>('SELECT holder, token::text, n FROM race_log ORDER BY id');
    console.log(`[pgfence tests] the race's holders in order: ${log.map((r) => r.holder).join(' ')}`);
    const { rows: counter } = await pool.query<{ n: number; fencing_token: string }>('SELECT n, fencing_token::text FROM race_counter');
    // Counter exact: every acknowledged increment is in it, none twice, none lost.
    const acknowledged = looped.reduce((sum, l) => sum + l.acks, 0);
    expect(acknowledged).toBe(loopers.length * ROUNDS);
    expect(counter[0]!.n).toBe(acknowledged);
    expect(log.map((r) => r.n)).toEqual(Array.from({ length: acknowledged }, (_, i) => i + 1));
    for (const l of looped) expect(log.filter((r) => r.holder === l.holder), l.holder).toHaveLength(l.acks);
    // Tokens strictly increase across every kind and side, in the order the name was held.
    const tokens = [stoppedToken, killedToken, ...log.map((r) => BigInt(r.token))];
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]! > tokens[i - 1]!, `grant ${i}: ${tokens[i - 1]} then ${tokens[i]}`).toBe(true);
    // The one counter of the name is the one every side drew from.
    const { rows: last } = await pool.query<{ token: string }>('SELECT token::text FROM pgfence.fencing_tokens WHERE key = $1', [KEY]);
    expect(last[0]!.token).toBe(log.at(-1)!.token);
    expect(counter[0]!.fencing_token).toBe(log.at(-1)!.token);
  }, 120_000);
});
