import { LockBudgetError, LockTableFullError } from '../core/index.js';
import type { LockTarget } from '../keys.js';
import type { Logger } from '../observe/index.js';
import type { SessionPool } from '../session/index.js';

/** The default budget's share of the server's lock table (which every application shares). */
const DEFAULT_LOCK_TABLE_SHARE = 0.25;
/** The share of the server's lock table that pgfence's lockers together never pass (the guard). */
export const SERVER_LOCK_TABLE_SHARE = 0.75;
/** A locker at its allowance samples again, but not more often than this (pg_locks reads every lock). */
const MIN_SAMPLE_GAP_MS = 100;

/**
 * The server's advisory locks now, and how many backends other than $1 (this locker's sessions) hold
 * some: the guard's sample, taken on one of the locker's pinned sessions (no connection of its own).
 */
export const serverAdvisoryLocksSql = {
  name: 'pgfence_server_advisory_locks',
  text: `SELECT count(*)::int AS locks, count(DISTINCT pid) FILTER (WHERE pid <> ALL($1::int4[]))::int AS holders
FROM pg_locks WHERE locktype = 'advisory'`,
};

/** What the guard last learnt of the server, and what this locker used then. */
interface ServerSample {
  locks: number;
  holders: number;
  ownThen: number;
  at: number;
}

/**
 * maxHeldLocks: the most advisory locks one locker holds or waits for at once. Checked before an
 * acquisition touches the server, so pgfence alone never fills the server's shared lock table (when
 * it is full, every application's new connections fail). Without an explicit value the budget is a
 * share of the table, learnt from the first pinned session (until then acquisitions are not limited:
 * they queue behind that session's connect anyway).
 *
 * The server-wide guard: pgfence's lockers together keep the server's advisory locks under
 * SERVER_LOCK_TABLE_SHARE of the table. Each locker samples the server's advisory-lock count (and
 * how many other backends hold some) at most every keepaliveMs, and again once it has used a quarter of
 * its allowance; between samples it may add at most an equal split of the headroom left under the
 * share among the holders it saw and itself, so that lockers growing at the same time stay under it.
 */
export class LockBudget {
  private limit: number | null;
  private tableSize: number | null = null;
  private sample: ServerSample | null = null;
  private sampling: Promise<void> | null = null;

  constructor(
    explicit: number | undefined,
    /** Locks this locker holds or waits for now (a waiting request may take one, and a marker). */
    private readonly inUse: () => number,
    private readonly logger: Logger,
    /** Reads the server's advisory locks on a pinned session (null: none open now, nothing to sample). */
    private readonly sampleServer: (() => Promise<{ locks: number; holders: number }> | null) | null = null,
    private readonly sampleEveryMs = 5000,
  ) {
    this.limit = explicit ?? null;
  }

  get maxHeldLocks(): number | null {
    return this.limit;
  }

  /** The server's lock table size, max_locks_per_transaction x (max_connections + max_prepared_transactions). */
  learnLockTable(size: number, advisory: { locks: number; holders: number; clients: number } | null = null): void {
    if (!Number.isFinite(size) || size <= 0) return;
    this.tableSize = size;
    // Read on the locker's first session, before it held anything: its first sample. Lockers that start
    // together see no holders yet, so the first split counts every other client backend as one.
    if (advisory) this.sample = { locks: advisory.locks, holders: Math.max(advisory.holders, advisory.clients), ownThen: 0, at: performance.now() };
    if (this.limit !== null) return;
    this.limit = Math.max(1, Math.floor(size * DEFAULT_LOCK_TABLE_SHARE));
    this.logger.debug({ lockTable: size, maxHeldLocks: this.limit }, 'pgfence: lock budget set from the server lock table');
  }

  /**
   * Throws LockBudgetError when `count` more locks would pass this locker's budget. Past the guard by
   * its last sample, returns a promise instead: it samples the server again (the last sample may be
   * stale) and rejects with LockTableFullError if the fresh one refuses too; null when admitted.
   */
  check(target: LockTarget, count = 1): Promise<void> | null {
    const used = this.inUse();
    if (this.limit !== null && used + count > this.limit) throw new LockBudgetError(target.name, target.key, this.limit, used);
    if (this.tableSize === null || this.sampleServer === null) return null;
    const sample = this.sample;
    if (!sample || performance.now() - sample.at >= this.sampleEveryMs || used - sample.ownThen >= this.allowance(sample) / 4) {
      void this.resample(false);
    }
    if (!sample || this.admits(sample, used, count)) return null;
    return this.resample(true).then(() => {
      const now = this.inUse();
      if (this.admits(this.sample!, now, count)) return;
      const fresh = this.sample!;
      const limit = Math.floor(this.tableSize! * SERVER_LOCK_TABLE_SHARE);
      throw new LockTableFullError({ guard: { serverLocks: fresh.locks + Math.max(0, now - fresh.ownThen), limit, table: this.tableSize! } });
    });
  }

  private admits(sample: ServerSample, used: number, count: number): boolean {
    return used + count <= sample.ownThen + this.allowance(sample);
  }

  /** How many locks this locker may add to what it held at `sample`: its split of the headroom under the share. */
  private allowance(sample: ServerSample): number {
    const headroom = Math.floor(this.tableSize! * SERVER_LOCK_TABLE_SHARE) - sample.locks;
    return Math.max(0, Math.floor(headroom / (sample.holders + 1)));
  }

  /** Samples the server again (`now`: whatever the last sample's age); resolves once the sample in flight landed. */
  private resample(now: boolean): Promise<void> {
    if (this.sampling) return this.sampling;
    if (!now && this.sample && performance.now() - this.sample.at < MIN_SAMPLE_GAP_MS) return Promise.resolve();
    const ownThen = this.inUse();
    const pending = this.sampleServer?.();
    if (!pending) return Promise.resolve();
    this.sampling = pending
      .then(
        ({ locks, holders }) => {
          // Locks granted while the sample was in flight may or may not be in it: count them as not (stricter).
          this.sample = { locks, holders, ownThen: Math.min(ownThen, this.inUse()), at: performance.now() };
        },
        (err: unknown) => this.logger.debug({ err }, 'pgfence: could not sample the server lock table; the last sample stands'),
      )
      .finally(() => (this.sampling = null));
    return this.sampling;
  }
}

/** The guard's sampler: the server's advisory locks, read on one of the locker's live pinned sessions. */
export function serverLockSampler(sessions: () => SessionPool): () => Promise<{ locks: number; holders: number }> | null {
  return () => {
    const live = sessions().sessions();
    if (live.length === 0) return null;
    const own = live.flatMap((s) => (s.processId === null ? [] : [s.processId]));
    return live[0]!.statement<{ locks: number; holders: number }>(serverAdvisoryLocksSql, [own]).then((rows) => rows[0]!);
  };
}

/** Enters a request into its line once the guard's admission (if any) has passed. */
export function afterAdmission<T>(request: { admission?: Promise<void> }, enter: () => Promise<T>): Promise<T> {
  const admission = request.admission;
  if (!admission) return enter();
  request.admission = undefined;
  return admission.then(enter);
}
