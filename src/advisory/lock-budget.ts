import { LockBudgetError } from '../core/index.js';
import type { LockTarget } from '../keys.js';
import type { Logger } from '../observe/index.js';

/** The default budget's share of the server's lock table (which every application shares). */
const DEFAULT_LOCK_TABLE_SHARE = 0.25;

/**
 * maxHeldLocks: the most advisory locks one locker holds or waits for at once. Checked before an
 * acquisition touches the server, so pgfence alone never fills the server's shared lock table (when
 * it is full, every application's new connections fail). Without an explicit value the budget is a
 * share of the table, learnt from the first pinned session (until then acquisitions are not limited:
 * they queue behind that session's connect anyway).
 */
export class LockBudget {
  private limit: number | null;

  constructor(
    explicit: number | undefined,
    /** Locks this locker holds or waits for now (a waiting request may take one, and a marker). */
    private readonly inUse: () => number,
    private readonly logger: Logger,
  ) {
    this.limit = explicit ?? null;
  }

  get maxHeldLocks(): number | null {
    return this.limit;
  }

  /** The server's lock table size, max_locks_per_transaction x (max_connections + max_prepared_transactions). */
  learnLockTable(size: number): void {
    if (this.limit !== null || !Number.isFinite(size) || size <= 0) return;
    this.limit = Math.max(1, Math.floor(size * DEFAULT_LOCK_TABLE_SHARE));
    this.logger.debug({ lockTable: size, maxHeldLocks: this.limit }, 'pgfence: lock budget set from the server lock table');
  }

  /** Throws LockBudgetError when `count` more locks would pass the budget. */
  check(target: LockTarget, count = 1): void {
    if (this.limit === null) return;
    const used = this.inUse();
    if (used + count > this.limit) throw new LockBudgetError(target.name, target.key, this.limit, used);
  }
}
