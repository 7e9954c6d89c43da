import { LockerClosedError, LockTimeoutError } from '../errors.js';
import type { LockTarget } from '../keys.js';
import type { HeldLockInfo, LockKind } from '../core/vocabulary.js';
import type { Observer } from '../observe/observer.js';
import { setLongTimeout } from '../core/signals.js';
import { Op } from './advisory-sql.js';
import type { ReleaseListener } from '../session/listener.js';
import type { Session } from '../session/session.js';
import type { SessionPool } from '../session/session-pool.js';

export interface LineRequest {
  timeoutMs: number;
  signal: AbortSignal | undefined;
}

/** What one attempt found: a grant, or a busy resource (and when it is worth looking again). */
export type Attempt<H> = { granted: H } | { busy: true; retryInMs?: number };

export interface WaitLineHooks<R extends LineRequest, H> {
  /** One attempt for the head of the line; `polite`: stand back if others already wait elsewhere. */
  attempt(request: R, polite: boolean): Promise<Attempt<H>>;
  /** A grant arrived for a waiter that had already given up: hand it back (resolves once it is back). */
  giveBack(handle: H): Promise<unknown>;
  granted(request: R, handle: H, waitMs: number): void;
  contention(request: R): void;
  timeout(request: R, waitMs: number): void;
  timeoutError(request: R): Error;
  /** The line is empty and idle: forget it. */
  idle(): void;
}

interface Waiter<R, H> {
  readonly request: R;
  readonly startedAt: number;
  waiting: boolean;
  settled: boolean;
  /** Gave up while its attempt was in flight: the answer it gets once that attempt is back (see giveUp). */
  leaving: (() => void) | null;
  resolve(handle: H | null): void;
  reject(err: unknown): void;
  cleanup: () => void;
}

const FIRST_POLL_MS = 50;
/** How long a waiter that gave up waits for its attempt in flight before it is answered anyway. */
const LEAVE_GRACE_MS = 250;
const MAX_POLL_MS = 1000;

/**
 * The local FIFO line of waiters for one key (a lease, a semaphore): only the head talks to the
 * database. A waiter that finds the resource busy announces itself (LISTEN, then a marker on the
 * key's session) and looks again, then waits for the NOTIFY of a release, with a backing-off poll
 * for releases nobody announced. Timeouts and aborts leave the line at once; a grant that arrives
 * for a waiter that left is handed back.
 */
export class WaitLine<R extends LineRequest, H> {
  private readonly queue: Waiter<R, H>[] = [];
  private busy = false;
  private wakePending = false;
  private markerSession: Session | null = null;
  private pollTimer: NodeJS.Timeout | null = null;
  private pollDelayMs = FIRST_POLL_MS;
  /** The head's attempt in flight, if any. */
  private attempting: Promise<void> | null = null;
  /** Late grants being handed back. */
  private readonly givingBack = new Set<Promise<unknown>>();

  constructor(
    readonly key: bigint,
    private readonly sessions: SessionPool,
    private readonly listener: ReleaseListener,
    private readonly hooks: WaitLineHooks<R, H>,
  ) {}

  get length(): number {
    return this.queue.length;
  }

  enqueue(request: R, nullOnTimeout: boolean): Promise<H | null> {
    if (request.signal?.aborted) return Promise.reject(request.signal.reason);
    return new Promise<H | null>((resolve, reject) => {
      const cancelTimer = request.timeoutMs > 0 ? setLongTimeout(() => this.giveUp(waiter, null), request.timeoutMs) : () => {};
      const onAbort = () => this.giveUp(waiter, request.signal!.reason);
      request.signal?.addEventListener('abort', onAbort, { once: true });
      const waiter: Waiter<R, H> = {
        request,
        startedAt: performance.now(),
        waiting: false,
        settled: false,
        leaving: null,
        resolve: (h) => (nullOnTimeout || h ? resolve(h) : reject(this.hooks.timeoutError(request))),
        reject,
        cleanup: () => {
          cancelTimer();
          request.signal?.removeEventListener('abort', onAbort);
        },
      };
      this.queue.push(waiter);
      if (this.queue.length > 1) {
        if (request.timeoutMs === 0) {
          this.settle(waiter, () => waiter.resolve(null));
          return;
        }
        this.hooks.contention(request);
      }
      this.drive();
    });
  }

  /** A release of the key was announced, or a local holder let go. */
  wake(): void {
    if (this.busy) {
      this.wakePending = true;
      return;
    }
    this.pollDelayMs = FIRST_POLL_MS;
    this.drive();
  }

  sessionLost(session: Session): void {
    if (this.markerSession === session) this.markerSession = null;
  }

  /**
   * Fails every waiter; resolves once the attempt in flight has answered and whatever it granted has
   * been handed back (so nothing is left held when the owner's connections go).
   */
  async close(reason: Error): Promise<void> {
    for (const w of [...this.queue]) this.settle(w, () => w.reject(reason));
    this.clearPoll();
    await this.attempting;
    await Promise.all(this.givingBack);
  }

  private drive(): void {
    if (this.busy) return;
    const head = this.queue[0];
    if (!head) {
      this.retire();
      return;
    }
    this.busy = true;
    this.wakePending = false;
    this.clearPoll();
    const attempting: Promise<void> = this.hooks.attempt(head.request, !head.waiting).then(
      (outcome) => {
        this.busy = false;
        if (this.attempting === attempting) this.attempting = null;
        if ('granted' in outcome) this.onGranted(head, outcome.granted);
        else this.onBusy(head, outcome.retryInMs);
      },
      (err: unknown) => {
        this.busy = false;
        if (this.attempting === attempting) this.attempting = null;
        this.settle(head, head.leaving ?? (() => head.reject(err)));
        this.drive();
      },
    );
    this.attempting = attempting;
  }

  private onGranted(head: Waiter<R, H>, handle: H): void {
    if (head.settled || head.leaving) {
      // The next in line looks only once this grant is back (else it would find its own locker holding it); a
      // waiter that gave up meanwhile is answered then, so that nothing of it is left held when it is.
      this.busy = true;
      const back = this.hooks.giveBack(handle).catch(() => {});
      this.givingBack.add(back);
      void back.finally(() => {
        this.givingBack.delete(back);
        this.busy = false;
        if (head.leaving) this.settle(head, head.leaving);
        this.drive();
      });
      return;
    } else {
      const waitMs = performance.now() - head.startedAt;
      this.settle(head, () => head.resolve(handle));
      this.hooks.granted(head.request, handle, waitMs);
    }
    this.drive();
  }

  private onBusy(head: Waiter<R, H>, retryInMs: number | undefined): void {
    if (head.leaving) this.settle(head, head.leaving);
    if (head.settled) return this.drive();
    if (head.request.timeoutMs === 0) {
      this.settle(head, () => head.resolve(null));
      return this.drive();
    }
    if (!head.waiting) {
      head.waiting = true;
      this.hooks.contention(head.request);
      // Announce the wait (listen first, then the marker), then look again: a release in between is not missed.
      this.busy = true;
      void this.announce().then(() => {
        this.busy = false;
        this.drive();
      });
      return;
    }
    if (this.wakePending) return this.drive();
    const delay = Math.min(retryInMs ?? this.pollDelayMs, this.pollDelayMs);
    this.pollDelayMs = Math.min(MAX_POLL_MS, this.pollDelayMs * 2);
    this.pollTimer = setTimeout(() => {
      this.pollTimer = null;
      this.wake();
    }, Math.max(1, delay));
  }

  private async announce(): Promise<void> {
    if (!(await this.listener.ensure()) || this.markerSession) return;
    try {
      const session = this.sessions.sessionFor(this.key);
      const result = await session.run(Op.registerMarker, this.key);
      if ((result & 2) === 0) this.markerSession = session;
    } catch {
      // Without a marker the poll still finds the release.
    }
  }

  /** Nobody waits: withdraw the marker and let the owner forget this line. */
  private retire(): void {
    this.clearPoll();
    const session = this.markerSession;
    this.markerSession = null;
    if (session && session.state === 'ready') session.run(Op.unregisterMarker, this.key).catch(() => {});
    this.hooks.idle();
  }

  private giveUp(waiter: Waiter<R, H>, abortReason: unknown): void {
    if (waiter.settled || waiter.leaving) return;
    const answer =
      abortReason !== null
        ? () => waiter.reject(abortReason)
        : () => {
            this.hooks.timeout(waiter.request, performance.now() - waiter.startedAt);
            waiter.resolve(null);
          };
    if (this.attempting && this.queue[0] === waiter) {
      // Its attempt is in flight: answer once it is back (a grant it brings handed back first), so that nothing of
      // this request is left held when the caller hears of it; after a short grace if the database is silent.
      waiter.leaving = answer;
      const grace = setTimeout(() => this.settle(waiter, answer), LEAVE_GRACE_MS);
      const cleanup = waiter.cleanup;
      waiter.cleanup = () => {
        clearTimeout(grace);
        cleanup();
      };
      return;
    }
    this.settle(waiter, answer);
    this.drive();
  }

  private settle(waiter: Waiter<R, H>, outcome: () => void): void {
    if (waiter.settled) return;
    waiter.settled = true;
    waiter.cleanup();
    const i = this.queue.indexOf(waiter);
    if (i >= 0) this.queue.splice(i, 1);
    outcome();
  }

  private clearPoll(): void {
    if (this.pollTimer) clearTimeout(this.pollTimer);
    this.pollTimer = null;
  }
}

export const closedError = () => new LockerClosedError('the locker was closed');

/** A request for a named resource (a lease, a semaphore), as the observer reports it. */
export interface TargetRequest extends LineRequest {
  target: LockTarget;
}

/**
 * The wait lines of one kind of resource, by key, with the standard reporting: grants, contention and
 * timeouts go to the observer under `kind`, a late grant is given back, an idle line is forgotten.
 */
export class WaitLines<R extends TargetRequest, H extends HeldLockInfo & { release(): Promise<boolean> }> {
  private readonly lines = new Map<bigint, WaitLine<R, H>>();

  constructor(
    private readonly kind: LockKind,
    private readonly sessions: SessionPool,
    private readonly listener: ReleaseListener,
    private readonly observer: Observer,
    private readonly attempt: (request: R, polite: boolean) => Promise<Attempt<H>>,
  ) {}

  get waiting(): number {
    let n = 0;
    for (const line of this.lines.values()) n += line.length;
    return n;
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
    await Promise.all([...this.lines.values()].map((line) => line.close(reason)));
  }

  private lineOf(key: bigint): WaitLine<R, H> {
    const existing = this.lines.get(key);
    if (existing) return existing;
    const info = (request: R) => ({ kind: this.kind, name: request.target.name, key: request.target.key, mode: 'exclusive' as const });
    const line: WaitLine<R, H> = new WaitLine(key, this.sessions, this.listener, {
      attempt: this.attempt,
      giveBack: (handle) => handle.release(),
      granted: (_request, handle, waitMs) => this.observer.acquired(handle, waitMs),
      contention: (request) => this.observer.contention(info(request)),
      timeout: (request, waitMs) => this.observer.timeout(info(request), waitMs),
      timeoutError: (request) => new LockTimeoutError(request.target.name, request.target.key, request.timeoutMs),
      idle: () => {
        if (this.lines.get(key) === line) this.lines.delete(key);
      },
    });
    this.lines.set(key, line);
    return line;
  }
}
