import { type Cancel, type HeldLockInfo, LockerClosedError, type LockKind, LockTimeoutError } from '../core/index.js';
import type { LockTarget } from '../keys.js';
import type { Observer } from '../observe/index.js';
import type { ReleaseListener, Session, SessionPool } from '../session/index.js';
import type { Attempt, AttemptPhase, BlockingWaits, Busy, LineRequest } from './strategy.js';
import { WaitLine } from './wait-line.js';
import { WaitCount } from './waiter.js';

export const closedError = () => new LockerClosedError('the locker was closed');

/** A request for a named resource (a lease, a semaphore), as the observer reports it. */
interface TargetRequest extends LineRequest {
  target: LockTarget;
}

/**
 * The wait lines of one kind of resource, by key, with the standard reporting: grants, contention and
 * timeouts go to the observer under `kind`, a late grant is given back, an idle line is forgotten.
 */
export class WaitLines<R extends TargetRequest, H extends HeldLockInfo & { release(): Promise<boolean> }> {
  private readonly lines = new Map<bigint, WaitLine<R, H>>();
  private readonly count = new WaitCount();
  /** The kind's blocking waits (one for all its lines), or null. */
  private readonly blocking: BlockingWaits<R, H> | null;

  constructor(
    private readonly kind: LockKind,
    private readonly sessions: SessionPool,
    private readonly listener: ReleaseListener,
    private readonly observer: Observer,
    private readonly attempt: (request: R, phase: AttemptPhase) => Promise<Attempt<H>>,
    /** Waits in PostgreSQL's queue, when the kind can (see BlockingWaits.block); a fresh request always tries first. */
    block?: (request: R, remainingMs: number, last: Busy | null, cancel: Cancel) => Promise<Attempt<H>> | null,
  ) {
    this.blocking = block ? { block, blockFirst: () => false } : null;
  }

  get waiting(): number {
    return this.count.n;
  }

  enqueue(key: bigint, request: R, nullOnTimeout: boolean): Promise<H | null> {
    return this.lineOf(key).enqueue(request, nullOnTimeout);
  }

  wake(key: bigint): void {
    this.lines.get(key)?.wake();
  }

  sessionLost(session: Session): void {
    for (const line of this.lines.values()) line.sessionLost(session);
  }

  /** Fails every waiter; resolves once late grants have been handed back. */
  async close(reason: Error): Promise<void> {
    const lines = [...this.lines.values()];
    for (const line of lines) line.close(reason);
    await Promise.all(lines.map((line) => line.drained()));
  }

  private lineOf(key: bigint): WaitLine<R, H> {
    const existing = this.lines.get(key);
    if (existing) return existing;
    const info = (request: R) => ({ kind: this.kind, name: request.target.name, key: request.target.key, mode: 'exclusive' as const });
    const line: WaitLine<R, H> = new WaitLine(
      key,
      this.sessions,
      this.listener,
      {
        attempt: this.attempt,
        giveBack: (handle) => handle.release(),
        granted: (_request, handle, waitMs) => this.observer.acquired(handle, waitMs),
        contention: (request) => this.observer.contention(info(request)),
        timeout: (request, waitMs) => this.observer.timeout(info(request), waitMs),
        timeoutError: (request) => new LockTimeoutError(request.target.name, request.target.key, request.timeoutMs, this.kind),
        idle: () => {
          if (this.lines.get(key) === line) this.lines.delete(key);
        },
      },
      this.count,
      this.blocking,
    );
    this.lines.set(key, line);
    return line;
  }
}
