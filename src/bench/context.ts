/**
 * What every measurement gets: the database, the run's settings, its own connections and lockers
 * (closed when the measurement ends), and the table it adds rows to.
 */

import pg from 'pg';
import { createLocker, type Locker, type LockerOptions } from '../locker.js';
import { openClient, withApplicationName } from '../session/index.js';

export interface BenchConfig {
  quick: boolean;
  warmupMs: number;
  /** Shortest round of a throughput comparison, per side. */
  roundMs: number;
  maxRoundMs: number;
  minRounds: number;
  maxRounds: number;
  /** Measuring time of one throughput comparison, all sides and rounds together. */
  budgetMs: number;
  /** Each round of each side completes at least this many cycles per worker (within 3x the round). */
  minCyclesPerWorker: number;
  /** One-shot samples per side (fresh lockers, fresh processes). */
  samples: number;
  /** Contending workers in the hand-off measurements. */
  workers: number;
  handoffRounds: number;
  handoffWarmupMs: number;
  handoffMs: number;
}

export function benchConfig(opts: { quick: boolean; seconds?: number | undefined; workers?: number | undefined }): BenchConfig {
  const base: BenchConfig = opts.quick
    ? { quick: true, warmupMs: 150, roundMs: 100, maxRoundMs: 500, minRounds: 3, maxRounds: 5, budgetMs: 1200, minCyclesPerWorker: 4, samples: 3, workers: 8, handoffRounds: 1, handoffWarmupMs: 200, handoffMs: 500 }
    : { quick: false, warmupMs: 500, roundMs: 150, maxRoundMs: 2000, minRounds: 7, maxRounds: 61, budgetMs: 12_000, minCyclesPerWorker: 20, samples: 15, workers: 8, handoffRounds: 3, handoffWarmupMs: 300, handoffMs: 2000 };
  if (opts.seconds !== undefined) {
    // --seconds: the measuring time of each comparison; the hand-off windows follow it.
    base.budgetMs = opts.seconds * 1000;
    base.handoffMs = Math.max(300, (opts.seconds * 1000) / (3 * base.handoffRounds));
  }
  if (opts.workers !== undefined) base.workers = opts.workers;
  return base;
}

export interface Row {
  measurement: string;
  pgfence: string;
  baseline: string;
  /** pgfence over the baseline: the median of per-round ratios. */
  ratio: string;
  /** The per-round ratios' min..max. */
  range: string;
  target: string;
  /** Against the target; null for rows without one. */
  met: boolean | null;
  /** pgfence's CPU per operation in the measuring process (µs), or per process summed where it says so. */
  cpu: string;
  /** The baseline's, measured the same way. */
  baselineCpu: string;
}

export class BenchContext {
  readonly rows: Row[] = [];
  readonly notes: string[] = [];
  private closers: (() => Promise<unknown>)[] = [];
  /** One round trip (SELECT 1 on a pinned client, median), measured before the first measurement. */
  rttMs = NaN;

  constructor(
    readonly url: string,
    readonly cfg: BenchConfig,
    /** Unique per run: names and application_name never meet another run's. */
    readonly runId: string,
  ) {}

  row(r: Partial<Row> & { measurement: string }): void {
    this.rows.push({ pgfence: '', baseline: '', ratio: '', range: '', target: '', met: null, cpu: '', baselineCpu: '', ...r });
  }

  note(text: string): void {
    this.notes.push(text);
  }

  urlFor(label: string): string {
    return withApplicationName(this.url, `${this.runId}_${label}`);
  }

  /** A name of this run, for locks and leases. */
  name(...parts: (string | number)[]): string {
    return [this.runId, ...parts].join('/');
  }

  async client(label: string, url = this.urlFor(label)): Promise<pg.Client> {
    const client = openClient(url, { connectionTimeoutMillis: 10_000 });
    client.on('error', () => {}); // a lost connection surfaces as a failed query
    this.onClose(() => client.end());
    await client.connect();
    return client;
  }

  locker(label: string, opts: Omit<LockerOptions, 'connectionString' | 'pool'> = {}, url = this.urlFor(label)): Locker {
    const locker = createLocker({ defaultTimeoutMs: 60_000, ...opts, connectionString: url });
    this.onClose(() => locker.close());
    return locker;
  }

  onClose(close: () => Promise<unknown>): void {
    this.closers.push(close);
  }

  /** Closes what this measurement opened, ignoring failures. */
  async closeAll(): Promise<void> {
    const closers = this.closers;
    this.closers = [];
    await Promise.all(closers.map((c) => c().catch(() => {}))); // tidying up: the figures are taken
  }
}

// Bare-pg baseline statements: named, so the server parses them once, as pgfence's are.
export const SQL = {
  tryLock: { name: 'bench_try', text: 'SELECT pg_try_advisory_lock($1::int8) AS ok' },
  unlock: { name: 'bench_unlock', text: 'SELECT pg_advisory_unlock($1::int8) AS ok' },
  lock: { name: 'bench_lock', text: 'SELECT pg_advisory_lock($1::int8)' },
  xactLock: { name: 'bench_xact_lock', text: 'SELECT pg_advisory_xact_lock($1::int8)' },
  /** The floor of anything durable: a one-row upsert, committed with synchronous_commit on. */
  durableCommit: {
    name: 'bench_commit',
    text: 'INSERT INTO pgfence_bench_commit VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET n = pgfence_bench_commit.n + 1',
  },
} as const;

/** Creates the table SQL.durableCommit writes, dropped when the measurement ends. */
export async function useCommitTable(ctx: BenchContext, client: pg.Client): Promise<void> {
  await client.query('CREATE TABLE IF NOT EXISTS pgfence_bench_commit (id int PRIMARY KEY, n bigint NOT NULL)');
  ctx.onClose(() => client.query('DROP TABLE IF EXISTS pgfence_bench_commit'));
}

/** Bare pg: try_lock + unlock on `key`, failing loudly if the key is busy (it never should be). */
export async function bareCycle(client: pg.Client, key: string): Promise<void> {
  const { rows } = await client.query<{ ok: boolean }>({ ...SQL.tryLock, values: [key] });
  if (!rows[0]!.ok) throw new Error('bare pg: an uncontended pg_try_advisory_lock failed');
  await client.query({ ...SQL.unlock, values: [key] });
}
