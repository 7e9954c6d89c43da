import { Cancel, MAX_TIMER_MS, setLongTimeout } from '../core/index.js';
import { MarkerOp, markerRegistered } from './marker-sql.js';
import type { ReleaseListener, Session, SessionPool } from '../session/index.js';
import type { Attempt, Busy, LineRequest, WaitStrategy } from './strategy.js';
import { giveUpOnTimeout, WaitCount, type Waiter } from './waiter.js';

/** Wake-up polls find releases nobody announced (a holder's session died, a non-pgfence holder, an expiry). */
const FIRST_POLL_MS = 50;
const MAX_POLL_MS = 1000;
/** How long a waiter that gave up waits for its attempt (or blocking wait) in flight before it is answered anyway. */
const LEAVE_GRACE_MS = 250;

/**
 * The local FIFO line of waiters for one key: only the head talks to the database, so N local waiters
 * cost one wait. A head that finds the resource busy announces itself (LISTEN, then a marker on the
 * key's session) and looks again, then waits in the database's own queue when its strategy can block,
 * else for the NOTIFY of a release, with a backing-off poll for releases nobody announced. Timeouts and
 * aborts leave the line at once; a grant that arrives for a waiter that left is handed back, and that
 * waiter is answered once it is back. Operations on the key (attempts, the strategy's chores, marker
 * registrations) run one at a time.
 */
export class WaitLine<R extends LineRequest, H> {
  private readonly queue: Waiter<R, H>[] = [];
  /** An operation for this key is in flight. */
  private busy = false;
  /** A release was announced (or a poll fell due) while busy. */
  private wakePending = false;
  private markerSession: Session | null = null;
  private pollTimer: NodeJS.Timeout | null = null;
  private pollDelayMs = FIRST_POLL_MS;
  /** The waiter whose attempt or blocking wait is in flight, if any. */
  private attemptFor: Waiter<R, H> | null = null;
  /** Cancels the blocking wait in flight. */
  private blockCancel: Cancel | null = null;
  /** drained() calls waiting for the key to go quiet (null: none; most lines never have one). */
  private onQuiet: (() => void)[] | null = null;
  /** Ends an operation begun by `beginOperation()` (bound once: every release and bulk try uses it). */
  readonly endOperation = (): void => {
    this.busy = false;
    this.drive();
  };

  constructor(
    readonly key: bigint,
    private readonly sessions: SessionPool,
    private readonly listener: ReleaseListener,
    private readonly strategy: WaitStrategy<R, H>,
    private readonly count: WaitCount = new WaitCount(),
  ) {}

  enqueue(request: R, nullOnTimeout: boolean): Promise<H | null> {
    if (request.signal?.aborted) return Promise.reject(request.signal.reason);
    return new Promise<H | null>((resolve, reject) => {
      // The usual timeout (under ~24.8 days) is one plain timer, given the waiter: no closures per acquire.
      const { timeoutMs, signal } = request;
      let timer: NodeJS.Timeout | null = null;
      let cancelLongTimer: (() => void) | null = null;
      const onAbort = signal ? () => this.giveUp(waiter, signal.reason) : null;
      const waiter: Waiter<R, H> = {
        request,
        startedAt: performance.now(),
        waiting: false,
        contended: false,
        settled: false,
        expired: false,
        last: null,
        leaving: null,
        resolve: (h) => (nullOnTimeout || h ? resolve(h) : reject(this.strategy.timeoutError(request))),
        reject,
        cleanup: () => {
          if (timer) clearTimeout(timer);
          cancelLongTimer?.();
          if (onAbort) signal!.removeEventListener('abort', onAbort);
        },
      };
      if (timeoutMs > MAX_TIMER_MS) cancelLongTimer = setLongTimeout(() => this.giveUp(waiter, null), timeoutMs);
      else if (timeoutMs > 0) timer = setTimeout(giveUpOnTimeout, timeoutMs, this, waiter);
      if (onAbort) signal!.addEventListener('abort', onAbort, { once: true });
      this.queue.push(waiter);
      this.count.n++;
      // Busy here already (others wait, or local holders hold it): a single try fails at once.
      const behindOthers = this.queue.length > 1;
      if (behindOthers || (this.strategy.heldHere?.() && !this.canShareNow(request))) {
        if (request.timeoutMs === 0) return this.settle(waiter, () => waiter.resolve(null));
        this.contended(waiter);
      }
      this.drive();
    });
  }

  /** A release of the key was announced (or a local holder let go): the waiting head looks again. */
  wake(): void {
    this.lookAgain(true);
  }

  /** `released`: a release was announced, and the poll starts over; else a poll fell due, and it backs off further. */
  private lookAgain(released: boolean): void {
    if (!this.queue[0]?.waiting) return;
    if (this.busy) {
      this.wakePending = true;
      return;
    }
    if (released) this.pollDelayMs = FIRST_POLL_MS;
    this.drive();
  }

  /** Something changed locally (a holder let go, a hold was lost): serve the line. */
  kick(): void {
    this.drive();
  }

  sessionLost(session: Session): void {
    if (this.markerSession === session) this.markerSession = null;
  }

  /**
   * Fails every waiter with `reason` (a factory: made only when someone waits, as a locker closes thousands
   * of idle lines) and cancels a blocking wait; a waiter whose attempt is in flight leaves as when it gives
   * up (see leave). Then the line withdraws its wait announcement (see drained()).
   */
  close(reason: Error | (() => Error)): void {
    for (const w of [...this.queue]) {
      const err = typeof reason === 'function' ? reason() : reason;
      if (w !== this.attemptFor) this.settle(w, () => w.reject(err));
      else if (!w.leaving) this.leave(w, () => w.reject(err));
    }
    this.blockCancel?.abort();
    this.clearPoll();
    this.drive();
  }

  /** Resolves once nothing is in flight for the key (a late grant handed back) and its marker is withdrawn. */
  async drained(): Promise<void> {
    while (this.busy || this.markerSession) await new Promise<void>((resolve) => (this.onQuiet ??= []).push(resolve));
  }

  private drive(): void {
    this.serve();
    if (!this.busy) this.notifyQuiet();
  }

  private serve(): void {
    if (this.busy) return;
    // 1. The key's own chores first (a session lock no local holder keeps goes back).
    this.busy = true;
    if (this.strategy.chore?.(this.endOperation)) return;
    this.busy = false;
    const head = this.queue[0];
    if (head) {
      // 2. Local holders: share with them, or wait for them to let go.
      if (this.strategy.heldHere?.()) {
        if (this.canShareNow(head.request)) {
          this.answerGrant(head, this.strategy.share!(head.request));
          this.drive();
        }
        return;
      }
      // 3. The head looks.
      return this.attempt(head);
    }
    // 4. Nobody waits any more: withdraw the marker, then let the owner forget this line.
    const marker = this.markerSession;
    if (marker) {
      this.markerSession = null;
      this.beginOperation();
      return marker.submit(MarkerOp.unregister, this.key, this.endOperation, this.endOperation);
    }
    this.clearPoll();
    this.strategy.idle();
  }

  /** Nobody waits or looks, no operation is in flight, no marker: an operation may run outside the line (see occupy). */
  get quiet(): boolean {
    return !this.busy && this.queue.length === 0 && this.markerSession === null;
  }

  /** Runs an operation for the key (also one of the owner's own), then serves the line again. */
  occupy(work: Promise<unknown>): void {
    this.beginOperation();
    void work.then(this.endOperation);
  }

  /**
   * Begins an operation for the key that ends with `endOperation()` (called once, never synchronously): what a
   * bulk try of thousands of keys uses instead of a promise per key. The line waits for it meanwhile.
   */
  beginOperation(): void {
    this.busy = true;
  }

  private canShareNow(request: R): boolean {
    return this.strategy.canShare?.(request) ?? false;
  }

  private attempt(head: Waiter<R, H>): void {
    if (!head.waiting && !this.markerSession && this.strategy.blockFirst?.(head.request)) {
      head.waiting = true;
      if (this.block(head)) return;
      head.waiting = false;
    }
    const phase = { waiting: head.waiting, markerSession: this.markerSession, last: head.last };
    this.inFlight(head, () => this.strategy.attempt(head.request, phase), false);
  }

  /** Waits in the database's queue when the strategy can (and the waiter has time left): true if it does. */
  private block(head: Waiter<R, H>): boolean {
    if (!this.strategy.block) return false;
    const { timeoutMs } = head.request;
    const remainingMs = timeoutMs === Infinity ? Infinity : head.startedAt + timeoutMs - performance.now();
    if (remainingMs <= 0) return false;
    const cancel = new Cancel();
    const blocking = this.strategy.block(head.request, remainingMs, head.last, cancel);
    if (!blocking) return false;
    this.blockCancel = cancel;
    this.inFlight(head, () => blocking, true);
    return true;
  }

  private inFlight(head: Waiter<R, H>, start: () => Promise<Attempt<H>>, blocked: boolean): void {
    this.busy = true;
    this.attemptFor = head;
    this.wakePending = false;
    this.clearPoll();
    const landed = () => {
      this.busy = false;
      this.attemptFor = null;
      this.blockCancel = null;
    };
    let pending: Promise<Attempt<H>>;
    try {
      pending = start();
    } catch (err) {
      pending = Promise.reject(err);
    }
    pending.then(
      (outcome) => {
        landed();
        if (outcome.announcedOn) this.markerSession = outcome.announcedOn;
        if (outcome.contended && !head.settled) this.contended(head);
        if ('granted' in outcome) this.onGranted(head, outcome.granted);
        else if ('retry' in outcome) this.drive();
        else this.onBusy(head, outcome, blocked);
      },
      (err: unknown) => {
        landed();
        this.settle(head, head.leaving ?? (() => head.reject(err)));
        this.drive();
      },
    );
  }

  private onGranted(head: Waiter<R, H>, handle: H): void {
    if (head.settled || head.leaving) {
      // The next in line looks only once this grant is back (else it would find its own locker holding it); a
      // waiter that gave up meanwhile is answered then, so that nothing of it is left held when it is.
      return this.occupy(
        this.strategy
          .giveBack(handle)
          .catch(() => {}) // never rejects: a release reports a failed give-back itself (a loss, logged at warn)
          .then(() => head.leaving && this.settle(head, head.leaving)),
      );
    }
    this.answerGrant(head, handle);
    this.drive();
  }

  private answerGrant(head: Waiter<R, H>, handle: H): void {
    const waitMs = performance.now() - head.startedAt;
    this.settle(head, () => head.resolve(handle));
    this.strategy.granted(head.request, handle, waitMs);
  }

  private onBusy(head: Waiter<R, H>, busy: Busy, blocked: boolean): void {
    // It met the key busy: contention (once per request), also when its time ran out meanwhile; a single try is no wait.
    if (!head.settled && head.request.timeoutMs !== 0) this.contended(head);
    if (head.leaving) this.settle(head, head.leaving);
    if (head.settled) return this.drive();
    if (head.expired) {
      this.settle(head, this.timedOut(head));
      return this.drive();
    }
    if (head.request.timeoutMs === 0) {
      this.settle(head, () => head.resolve(null));
      return this.drive();
    }
    head.last = busy;
    if (blocked) {
      // A blocking wait ended without a grant: look again soon. A lease holds the name: wait for its release, announced.
      if (busy.leaseHeld) return this.occupy(this.announce());
      return this.schedulePoll(busy.retryInMs);
    }
    if (!head.waiting) {
      head.waiting = true;
      this.contended(head);
      if (this.block(head)) return;
      // Announce the wait (listen first, then the marker), then look again: a release in between is not missed.
      return this.occupy(this.announce());
    }
    if (this.block(head)) return;
    if (this.wakePending) return this.drive();
    this.schedulePoll(busy.retryInMs);
  }

  private async announce(): Promise<void> {
    const listening = await this.listener.ensure();
    // Session locks register the marker with their next try.
    if (this.strategy.announcesInAttempt || !listening || this.markerSession) return;
    try {
      const session = this.sessions.sessionFor(this.key);
      if (markerRegistered(await session.run(MarkerOp.register, this.key))) this.markerSession = session;
    } catch {
      // Without a marker the poll still finds the release.
    }
  }

  private schedulePoll(retryInMs: number | undefined): void {
    const delay = Math.min(retryInMs ?? this.pollDelayMs, this.pollDelayMs);
    this.pollDelayMs = Math.min(MAX_POLL_MS, this.pollDelayMs * 2);
    this.pollTimer = setTimeout(() => {
      this.pollTimer = null;
      this.lookAgain(false);
    }, Math.max(1, delay));
  }

  private contended(waiter: Waiter<R, H>): void {
    if (waiter.contended) return;
    waiter.contended = true;
    this.strategy.contention(waiter.request);
  }

  private timedOut(waiter: Waiter<R, H>): () => void {
    return () => {
      this.strategy.timeout(waiter.request, performance.now() - waiter.startedAt);
      waiter.resolve(null);
    };
  }

  /** Timeout or abort: the waiter leaves the line; what its attempt in flight brings is handed back first. */
  giveUp(waiter: Waiter<R, H>, abortReason: unknown): void {
    if (waiter.settled || waiter.leaving) return;
    const answer = abortReason !== null ? () => waiter.reject(abortReason) : this.timedOut(waiter);
    if (this.attemptFor !== waiter) {
      this.settle(waiter, answer);
      return this.drive();
    }
    const connecting =
      abortReason === null && !waiter.expired && !waiter.waiting && !this.blockCancel
        ? this.strategy.connecting?.(waiter.request, waiter.startedAt)
        : null;
    if (connecting) {
      // Nothing is known yet, busy or unreachable: the first answer decides, within the bound.
      waiter.expired = true;
      this.onCleanup(waiter, setTimeout(() => this.settle(waiter, () => waiter.reject(connecting.error())), connecting.boundMs));
      return;
    }
    this.leave(waiter, answer);
  }

  /**
   * The waiter's attempt is in flight (a blocking wait is cancelled): it is answered once that is back (a grant
   * handed back first), so that nothing of its request is held when the caller hears of it; after a grace if silent.
   */
  private leave(waiter: Waiter<R, H>, answer: () => void): void {
    this.blockCancel?.abort();
    waiter.leaving = answer;
    this.onCleanup(waiter, setTimeout(() => this.settle(waiter, answer), LEAVE_GRACE_MS));
  }

  private onCleanup(waiter: Waiter<R, H>, timer: NodeJS.Timeout): void {
    const cleanup = waiter.cleanup;
    waiter.cleanup = () => {
      clearTimeout(timer);
      cleanup();
    };
  }

  private settle(waiter: Waiter<R, H>, outcome: () => void): void {
    if (waiter.settled) return;
    waiter.settled = true;
    waiter.cleanup();
    const i = this.queue.indexOf(waiter);
    if (i >= 0) this.queue.splice(i, 1);
    this.count.n--;
    outcome();
  }

  private clearPoll(): void {
    if (this.pollTimer) clearTimeout(this.pollTimer);
    this.pollTimer = null;
  }

  private notifyQuiet(): void {
    const waiting = this.onQuiet;
    if (waiting === null) return;
    this.onQuiet = null;
    for (const resolve of waiting) resolve();
  }
}
