import { BaseHandle, type LockMode } from '../core/index.js';
import type { LockTarget } from '../keys.js';

/** A request for a session advisory lock, as the areas' option parsing builds it. */
export interface AcquireRequest {
  target: LockTarget;
  mode: LockMode;
  /** 0 = one attempt; Infinity = no bound. */
  timeoutMs: number;
  signal: AbortSignal | undefined;
  /** Maximum hold, or undefined. */
  ttlMs: number | undefined;
  /** Issue a fencing token with the grant (exclusive only). */
  fencing: boolean;
  /** How events and metrics report it: 'leader' for a leader election's session guard; default 'lock'. */
  kind?: 'lock' | 'leader';
  /** Part of a large acquireAll: tried on the bulk slot's session (SessionPool.lockSessionFor). */
  bulk?: boolean;
  /** The server-wide lock-table guard asks the server again before admitting it (see LockBudget.check). */
  admission?: Promise<void>;
}

/** A session advisory lock held by this locker. */
export class AdvisoryLockHandle extends BaseHandle {
  /** @internal */ cancelTtl: (() => void) | undefined;

  constructor(
    private readonly manager: { release(handle: AdvisoryLockHandle): Promise<boolean> },
    name: string | null,
    key: bigint,
    mode: LockMode,
    token: bigint | null,
    /** The session id the lock lives on (pgfence-internal). */ readonly sessionId: number,
    kind: 'lock' | 'leader' = 'lock',
  ) {
    super(kind, name, key, mode, token);
  }

  protected doRelease(): Promise<boolean> {
    return this.manager.release(this);
  }
}
