// Cron singletons end to end: three processes fire the same job on skewed schedules; with an
// at-least-for hold each period's job runs exactly once, without one it runs again on late hosts.
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useMigratedDatabase } from './support/db.js';

const HOST = fileURLToPath(new URL('./fixtures/cron-node.mjs', import.meta.url));
// Scaled down from cron's minutes so that the test takes ~25 s: a 3 s period, hosts firing 0, 0.75
// and 1.5 s into it, a hold of 2.25 s (longer than the largest skew, shorter than the period: a
// margin of 0.75 s both ways for late timers on a loaded machine), a job of 0.2 s.
const PERIOD_MS = 3000;
const STEP_MS = 750;
const MIN_HOLD_MS = 2250;
const SLOTS = 8;
const JOB_MS = 200;

let db: Awaited<ReturnType<typeof useMigratedDatabase>>;
let pool: pg.Pool;
const children = new Set<ChildProcess>();

beforeAll(async () => {
  db = await useMigratedDatabase('cron');
  pool = new pg.Pool({ connectionString: db.url, max: 2 });
  await pool.query('CREATE TABLE cron_runs (id bigserial PRIMARY KEY, variant text NOT NULL, slot int NOT NULL, host int NOT NULL, token bigint NOT NULL)');
});
afterAll(async () => {
  for (const c of children) c.kill('SIGKILL');
  await pool.end();
});

function startHost(host: number): { proc: ChildProcess; ready: Promise<void>; done: Promise<void> } {
  const proc = spawn(process.execPath, [HOST, db.url, String(host), String(PERIOD_MS), String(STEP_MS), String(MIN_HOLD_MS), String(SLOTS), String(JOB_MS)], {
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  children.add(proc);
  let out = '';
  let onReady: () => void;
  const ready = new Promise<void>((resolve) => (onReady = resolve));
  proc.stdout!.on('data', (d: Buffer) => {
    out += d.toString();
    if (out.includes('ready\n')) onReady();
  });
  proc.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const done = new Promise<void>((resolve, reject) =>
    proc.on('close', (code) => {
      children.delete(proc);
      if (code === 0 && out.includes('done')) resolve();
      else reject(new Error(`host ${host} exited ${code}: ${out}`));
    }),
  );
  return { proc, ready, done };
}

describe('cron singletons', () => {
  it('three hosts fire every period 0-1.5 s apart: with minHoldMs each period runs exactly once; without, late hosts rerun it', async () => {
    const hosts = [0, 1, 2].map(startHost);
    await Promise.all(hosts.map((h) => h.ready));
    // One start time for all, handed over once every host is connected (no start-up lag in the skew).
    const start = Date.now() + 500;
    for (const h of hosts) h.proc.stdin!.end(`${start}\n`);
    await Promise.all(hosts.map((h) => h.done));

    const { rows: held } = await pool.query<{ slot: number; runs: number; hosts: number[]; tokens: string[] }>(
      `SELECT slot, count(*)::int AS runs, array_agg(host ORDER BY id) AS hosts, array_agg(token::text ORDER BY id) AS tokens
         FROM cron_runs WHERE variant = 'held' GROUP BY slot ORDER BY slot`,
    );
    expect(held.map((r) => [r.slot, r.runs])).toEqual(Array.from({ length: SLOTS }, (_, s) => [s, 1]));
    // The host that fired first changes from period to period, and each run has a newer token.
    expect(new Set(held.map((r) => r.hosts[0])).size).toBe(3);
    const tokens = held.map((r) => BigInt(r.tokens[0]!));
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]! > tokens[i - 1]!).toBe(true);

    // The same schedule without the hold: the job is over before the later hosts fire, so they run it again.
    const { rows: naive } = await pool.query<{ repeated: number }>(
      `SELECT count(*)::int AS repeated FROM (SELECT slot FROM cron_runs WHERE variant = 'naive' GROUP BY slot HAVING count(*) > 1) s`,
    );
    expect(naive[0]!.repeated).toBeGreaterThan(0);
  }, 90_000);
});
