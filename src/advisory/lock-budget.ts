import { LockBudgetError, LockTableFullError } from '../core/index.js';
import type { LockTarget } from '../keys.js';
import type { Logger } from '../observe/index.js';
import type { SessionPool } from '../session/index.js';
import { serverAdvisoryLocksSql } from './advisory-sql.js';

/** The default budget's share of the server's lock table (which every application shares). */
const DEFAULT_LOCK_TABLE_SHARE = 0.25;
/** The share of the server's lock table that pgfence's lockers together never pass (the guard). */
export const SERVER_LOCK_TABLE_SHARE = 0.75;
/** A locker at its allowance samples again, but not more often than this (pg_locks reads every lock). */
const MIN_SAMPLE_GAP_MS = 100;

/** What the guard learns of the server in one sample. */
interface ServerCounts {
  locks: number;
  holders: number;
  clients: number;
}

/** What the guard last learnt of the server, and what this locker used then. */
interface ServerSample extends ServerCounts {
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
 * share among itself and every other client backend that may be growing too (the holders it saw, or
 * all other client backends if more: one that held nothing at the sample may be taking locks now), so
 * that lockers growing at the same time stay under it. A request past that allowance waits for a fresh
 * sample, which admits it by its split among the holders it shows (nobody else holds locks at that
 * moment); requests admitted but not yet counted as in use count against the same sample.
 */
export class LockBudget {
  private limit: number | null;
  private tableSize: number | null = null;
  private sample: ServerSample | null = null;
  private sampling: Promise<void> | null = null;
  /** Locks admitted by the guard whose requests have not yet entered their line (inUse does not count them yet). */
  private admitting = 0;
  /** Locks the acquireAll calls in flight will still take (their tries in flight, the keys past their wait): see reserve. */
  private reserved = 0;

  constructor(
    explicit: number | undefined,
    /** Locks this locker holds or waits for now (a waiting request may take one, and a marker). */
    private readonly inUse: () => number,
    private readonly logger: Logger,
    /** Reads the server's advisory locks on a pinned session (null: none open now, nothing to sample). */
    private readonly sampleServer: (() => Promise<ServerCounts> | null) | null = null,
    private readonly sampleEveryMs = 5000,
  ) {
    this.limit = explicit ?? null;
  }

  get maxHeldLocks(): number | null {
    return this.limit;
  }

  /** The server's lock table size, max_locks_per_transaction x (max_connections + max_prepared_transactions). */
  learnLockTable(size: number, advisory: ServerCounts | null = null): void {
    if (!Number.isFinite(size) || size <= 0) return;
    this.tableSize = size;
    // Read on the locker's first session, before it held anything: its first sample.
    if (advisory) this.sample = { ...advisory, ownThen: 0, at: performance.now() };
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
    const inUse = this.inUse() + this.reserved;
    if (this.limit !== null && inUse + count > this.limit) throw new LockBudgetError(target.name, target.key, this.limit, inUse);
    if (this.tableSize === null || this.sampleServer === null) return null;
    const used = inUse + this.admitting;
    const sample = this.sample;
    if (!sample || performance.now() - sample.at >= this.sampleEveryMs || used - sample.ownThen >= this.allowance(sample, growthSharers(sample)) / 4) {
      void this.resample(false);
    }
    if (!sample || this.admits(sample, used, count, growthSharers(sample))) return null;
    return this.resample(true).then(() => {
      const now = this.inUse() + this.reserved + this.admitting;
      const fresh = this.sample!;
      // Only a sample taken now shows who holds locks now; when none could be taken, the old one's rule stands.
      const sharers = fresh !== sample ? fresh.holders : growthSharers(fresh);
      if (this.admits(fresh, now, count, sharers)) {
        this.admit(count);
        return;
      }
      const limit = Math.floor(this.tableSize! * SERVER_LOCK_TABLE_SHARE);
      throw new LockTableFullError({ guard: { serverLocks: fresh.locks + Math.max(0, now - fresh.ownThen), limit, table: this.tableSize! } });
    });
  }

  /**
   * Counts the `total` locks of a set admitted as a whole (acquireAll) for as long as it is in flight:
   * its tries in flight and the keys past the one it waits for are in no line, so inUse alone would
   * admit others into the room the set will take. `holding(n)`: the set now holds (or waits for) n of
   * them, which inUse counts; `end()` once it is over.
   */
  reserve(total: number): BudgetReservation {
    let counted = total;
    this.reserved += total;
    const set = (n: number) => {
      this.reserved += n - counted;
      counted = n;
    };
    return { holding: (n) => set(Math.max(0, total - n)), end: () => set(0) };
  }

  /**
   * Counts `count` admitted locks until their request has entered its line: it does so as soon as the
   * admission settles (a microtask), so they are in inUse by the next turn of the event loop.
   */
  private admit(count: number): void {
    this.admitting += count;
    setImmediate(() => (this.admitting -= count));
  }

  private admits(sample: ServerSample, used: number, count: number, sharers: number): boolean {
    return used + count <= sample.ownThen + this.allowance(sample, sharers);
  }

  /** How many locks this locker may add to what it held at `sample`: its split of the headroom under the share among itself and `sharers`. */
  private allowance(sample: ServerSample, sharers: number): number {
    const headroom = Math.floor(this.tableSize! * SERVER_LOCK_TABLE_SHARE) - sample.locks;
    return Math.max(0, Math.floor(headroom / (sharers + 1)));
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
        (counts) => {
          // Locks granted while the sample was in flight may or may not be in it: count them as not (stricter).
          this.sample = { ...counts, ownThen: Math.min(ownThen, this.inUse()), at: performance.now() };
        },
        (err: unknown) => this.logger.debug({ err }, 'pgfence: could not sample the server lock table; the last sample stands'),
      )
      .finally(() => (this.sampling = null));
    return this.sampling;
  }
}

/** A set's claim on the budget while it is in flight (LockBudget.reserve). */
export interface BudgetReservation {
  holding(n: number): void;
  end(): void;
}

/** The guard's sampler: the server's advisory locks, read on one of the locker's live pinned sessions. */
export function serverLockSampler(sessions: () => SessionPool): () => Promise<ServerCounts> | null {
  return () => {
    const live = sessions().sessions();
    if (live.length === 0) return null;
    const own = live.flatMap((s) => (s.processId === null ? [] : [s.processId]));
    return live[0]!.statement<ServerCounts>(serverAdvisoryLocksSql, [own]).then((rows) => rows[0]!);
  };
}

/** Who may be growing between samples besides this locker: the holders seen, or every other client backend if more. */
const growthSharers = (sample: ServerCounts) => Math.max(sample.holders, sample.clients);

/** Enters a request into its line once the guard's admission (if any) has passed. */
export function afterAdmission<T>(request: { admission?: Promise<void> }, enter: () => Promise<T>): Promise<T> {
  const admission = request.admission;
  if (!admission) return enter();
  request.admission = undefined;
  return admission.then(enter);
}
