import { Cancel, IllegalTransitionError } from '../core/index.js';
import { listen, registerMarker } from './announce.js';
import { MarkerOp } from './marker-sql.js';
import type { ReleaseListener, Session, SessionPool } from '../session/index.js';
import type { Attempt, BlockingWaits, Busy, LineRequest, LocalHolders, WaitStrategy } from './strategy.js';
import { type AttemptingState, attempting, attemptFor, blocking, type BlockingState, IDLE, inFlight, type LineState, OPERATING, polling, WAIT_LINE_STATES } from './line-states.js';
import { EXPIRED, leaving, newWaiter, WaitCount, type Waiter, WAITING } from './waiter.js';

/** Wake-up polls find releases nobody announced (a holder's session died, a non-pgfence holder, an expiry). */
const FIRST_POLL_MS = 50;
const MAX_POLL_MS = 1000;
/** How long a waiter that gave up waits for its attempt (or blocking wait) in flight before it is answered anyway. */
const LEAVE_GRACE_MS = 250;

/**
 * The local FIFO line of waiters for one key: only the head talks to the database, so N local waiters
 * cost one wait. A head that finds the resource busy announces itself (LISTEN, then a marker on the
 * key's session) and looks again, then waits in the database's own queue when its kind can block,
 * else for the NOTIFY of a release, with a backing-off poll for releases nobody announced. Timeouts and
 * aborts leave the line at once; a grant that arrives for a waiter that left is handed back, and that
 * waiter is answered once it is back. Operations on the key (attempts, the holders' chores, marker
 * registrations) run one at a time. The line's state is one value (line-states.ts), each waiter's
 * another (waiter.ts), each changed only by its `move`.
 */
export class WaitLine<R extends LineRequest, H> {
  private readonly queue: Waiter<R, H>[] = [];
  private state: LineState<Waiter<R, H>> = IDLE;
  /**
   * Not a state: the session holding the key's wait announcement, a resource that outlives the states (an
   * attempt or announce() registers it, later attempts use it, serve() withdraws it once nobody waits).
   */
  private markerSession: Session | null = null;
  /** Not a state: the poll's backing-off delay, kept from one poll to the next (an announced release resets it). */
  private pollDelayMs = FIRST_POLL_MS;
  /** Not a state: drained() calls waiting for the key to go quiet (null: none; most lines never have one). */
  private onQuiet: (() => void)[] | null = null;
  /** Ends an operation begun by `beginOperation()` (bound once: every release and bulk try uses it). */
  readonly endOperation = (): void => {
    this.move(IDLE);
    this.drive();
  };
  private readonly pollDue = (): void => {
    this.move(IDLE);
    this.lookAgain(false);
  };

  constructor(
    readonly key: bigint,
    private readonly sessions: SessionPool,
    private readonly listener: ReleaseListener,
    private readonly strategy: WaitStrategy<R, H>,
    private readonly count: WaitCount = new WaitCount(),
    /** The kind can wait in the database's own queue. */
    private readonly blocking: BlockingWaits<R, H> | null = null,
    /** The kind's holders in this process stand in the line. */
    private readonly holders: LocalHolders<R, H> | null = null,
  ) {}

  /** The one way the line's state changes: throws IllegalTransitionError on a move WAIT_LINE_STATES does not list. */
  private move(next: LineState<Waiter<R, H>>): void {
    const from = this.state;
    this.state = WAIT_LINE_STATES.transition(from, next);
    if (from.kind === 'polling') clearTimeout(from.timer);
  }

  enqueue(request: R, nullOnTimeout: boolean): Promise<H | null> {
    if (request.signal?.aborted) return Promise.reject(request.signal.reason);
    return new Promise<H | null>((resolve, reject) => {
      const answer = (h: H | null) => (nullOnTimeout || h ? resolve(h) : reject(this.strategy.timeoutError(request)));
      const waiter = newWaiter<R, H>(this, request, answer, reject);
      this.queue.push(waiter);
      this.count.n++;
      // Busy here already (others wait, or local holders hold it): a single try fails at once.
      const behindOthers = this.queue.length > 1;
      if (behindOthers || (this.holders?.heldHere() && !this.canShareNow(request))) {
        if (request.timeoutMs === 0) {
          if (this.finish(waiter)) waiter.resolve(null);
          return;
        }
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
    if (this.queue[0]?.state.kind !== 'waiting') return;
    const state = this.state;
    if (state.kind === 'attempting' || state.kind === 'blocking') {
      // Looked at once if the answer is busy.
      if (!state.woken) this.move({ ...state, woken: true });
      return;
    }
    // The operation's end serves the line: the head looks then.
    if (state.kind === 'operating') return;
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
      if (w !== attemptFor(this.state)) this.settle(w, () => w.reject(err));
      else if (w.state.kind !== 'leaving') this.leave(w, () => w.reject(err));
    }
    if (this.state.kind === 'blocking') this.state.cancel.abort();
    if (this.state.kind === 'polling') this.move(IDLE);
    this.drive();
  }

  /** Resolves once nothing is in flight for the key (a late grant handed back) and its marker is withdrawn. */
  async drained(): Promise<void> {
    while (inFlight(this.state) || this.markerSession) await new Promise<void>((resolve) => (this.onQuiet ??= []).push(resolve));
  }

  /** Nobody waits or looks, no operation is in flight, no marker: an operation may run outside the line (see occupy). */
  get quiet(): boolean {
    return !inFlight(this.state) && this.queue.length === 0 && this.markerSession === null;
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
    this.move(OPERATING);
  }

  private drive(): void {
    this.serve();
    if (!inFlight(this.state)) this.notifyQuiet();
  }

  /**
   * Serves the line: the first of these steps that applies takes it, in this order: 1. the key's own chores
   * (a session lock no local holder keeps goes back); 2. local holders (share with them, or wait for them to
   * let go); 3. the head's attempt; 4. nobody waits any more: the marker's withdrawal; 5. the line is idle.
   */
  private serve(): void {
    if (inFlight(this.state)) return;
    const head = this.queue[0];
    if (this.chores() || this.localHolders(head)) return;
    if (head) return this.attempt(head);
    if (!this.withdrawMarker()) this.rest();
  }

  /** Its `done` (endOperation) comes later, never synchronously: the line is operating once the chore has started. */
  private chores(): boolean {
    if (!this.holders?.chore(this.endOperation)) return false;
    this.move(OPERATING);
    return true;
  }

  private localHolders(head: Waiter<R, H> | undefined): boolean {
    const holders = this.holders;
    if (!head || !holders?.heldHere()) return false;
    if (this.canShareNow(head.request)) {
      this.answerGrant(head, holders.share(head.request));
      this.drive();
    }
    return true;
  }

  private withdrawMarker(): boolean {
    const marker = this.markerSession;
    if (!marker) return false;
    this.markerSession = null;
    this.beginOperation();
    marker.submit(MarkerOp.unregister, this.key, this.endOperation, this.endOperation);
    return true;
  }

  /** Nothing to do: no poll stays due, and the owner may forget this line. */
  private rest(): void {
    if (this.state.kind === 'polling') this.move(IDLE);
    this.strategy.idle();
  }

  private canShareNow(request: R): boolean {
    return this.holders?.canShare(request) ?? false;
  }

  private attempt(head: Waiter<R, H>): void {
    const was = head.state;
    if (was.kind !== 'waiting' && !this.markerSession && this.blocking?.blockFirst(head.request) && this.block(head)) {
      if (was.kind === 'queued') head.move(WAITING);
      return;
    }
    const flight = attempting(head, was.kind === 'waiting', this.markerSession, head.last);
    this.move(flight);
    let pending: Promise<Attempt<H>>;
    try {
      pending = this.strategy.attempt(head.request, flight);
    } catch (err) {
      pending = Promise.reject(err);
    }
    pending.then(this.onLanded, this.onFailed);
  }

  /** Waits in the database's queue when the kind can (and the waiter has time left): true if it does. */
  private block(head: Waiter<R, H>): boolean {
    if (!this.blocking) return false;
    const { timeoutMs } = head.request;
    const remainingMs = timeoutMs === Infinity ? Infinity : head.startedAt + timeoutMs - performance.now();
    if (remainingMs <= 0) return false;
    const cancel = new Cancel();
    const pending = this.blocking.block(head.request, remainingMs, head.last, cancel);
    if (!pending) return false;
    this.move(blocking(head, cancel));
    pending.then(this.onLanded, this.onFailed);
    return true;
  }

  /** The attempt or blocking wait in flight came back: the line is idle again, and its waiter hears. */
  private land(): AttemptingState<Waiter<R, H>> | BlockingState<Waiter<R, H>> {
    const flight = this.state;
    if (flight.kind !== 'attempting' && flight.kind !== 'blocking') throw new IllegalTransitionError(WAIT_LINE_STATES.name, flight.kind, IDLE.kind);
    this.move(IDLE);
    return flight;
  }

  // An attempt or blocking wait came back (bound once: its waiter is the in-flight state's, no closure per attempt).
  private readonly onLanded = (outcome: Attempt<H>): void => {
    const flight = this.land();
    const head = flight.waiter;
    if (outcome.announcedOn) this.markerSession = outcome.announcedOn;
    if (outcome.contended && head.state.kind !== 'settled') this.contended(head);
    if ('granted' in outcome) this.onGranted(head, outcome.granted);
    else if ('retry' in outcome) this.drive();
    else this.onBusy(head, outcome, flight);
  };

  private readonly onFailed = (err: unknown): void => {
    const head = this.land().waiter;
    const state = head.state;
    this.settleAndDrive(head, state.kind === 'leaving' ? state.answer : () => head.reject(err));
  };

  private onGranted(head: Waiter<R, H>, handle: H): void {
    const { kind } = head.state;
    if (kind === 'settled' || kind === 'leaving') {
      // The next in line looks only once this grant is back (else it would find its own locker holding it); a
      // waiter that gave up meanwhile is answered then, so that nothing of it is left held when it is.
      return this.occupy(
        this.strategy
          .giveBack(handle)
          .catch(() => {}) // never rejects: a release reports a failed give-back itself (a loss, logged at warn)
          .then(() => {
            const state = head.state;
            if (state.kind === 'leaving') this.settle(head, state.answer);
          }),
      );
    }
    this.answerGrant(head, handle);
    this.drive();
  }

  private answerGrant(head: Waiter<R, H>, handle: H): void {
    const waitMs = performance.now() - head.startedAt;
    if (this.finish(head)) head.resolve(handle);
    this.strategy.granted(head.request, handle, waitMs);
  }

  private onBusy(head: Waiter<R, H>, busy: Busy, flight: AttemptingState<unknown> | BlockingState<unknown>): void {
    // It met the key busy: contention (once per request), also when its time ran out meanwhile; a single try is no wait.
    if (head.state.kind !== 'settled' && head.request.timeoutMs !== 0) this.contended(head);
    // A contention listener that served the line meanwhile (a synchronous acquire of the key) went on from here.
    if (this.state.kind !== 'idle') return;
    const state = head.state;
    if (state.kind === 'leaving') return this.settleAndDrive(head, state.answer);
    if (state.kind === 'settled') return this.drive();
    if (state.kind === 'expired') return this.settleAndDrive(head, this.timedOut(head));
    if (head.request.timeoutMs === 0) return this.settleAndDrive(head, () => head.resolve(null));
    head.last = busy;
    if (flight.kind === 'blocking') {
      // A blocking wait ended without a grant: look again soon. A lease holds the name: wait for its release, announced.
      if (busy.leaseHeld) return this.occupy(this.announce());
      return this.schedulePoll(busy.retryInMs);
    }
    if (state.kind === 'queued') {
      head.move(WAITING);
      if (this.block(head)) return;
      // Announce the wait, then look again: a release in between is not missed.
      return this.occupy(this.announce());
    }
    if (this.block(head)) return;
    if (flight.woken) return this.drive();
    this.schedulePoll(busy.retryInMs);
  }

  /** Announces the wait: listen first, then the marker (registerMarker takes the proof that only listen gives). */
  private async announce(): Promise<void> {
    const listening = await listen(this.listener);
    // Session locks register the marker with their next try.
    if (this.holders?.announcesInAttempt || !listening || this.markerSession) return;
    const session = await registerMarker(listening, this.sessions, this.key);
    if (session) this.markerSession = session;
  }

  private schedulePoll(retryInMs: number | undefined): void {
    const delay = Math.min(retryInMs ?? this.pollDelayMs, this.pollDelayMs);
    this.pollDelayMs = Math.min(MAX_POLL_MS, this.pollDelayMs * 2);
    this.move(polling(setTimeout(this.pollDue, Math.max(1, delay))));
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
    const { kind } = waiter.state;
    if (kind === 'settled' || kind === 'leaving') return;
    const answer = abortReason !== null ? () => waiter.reject(abortReason) : this.timedOut(waiter);
    if (attemptFor(this.state) !== waiter) return this.settleAndDrive(waiter, answer);
    const connecting =
      abortReason === null && kind === 'queued' && this.state.kind === 'attempting' ? this.blocking?.connecting?.(waiter.request, waiter.startedAt) : null;
    if (connecting) {
      // Nothing is known yet, busy or unreachable: the first answer decides, within the bound.
      waiter.move(EXPIRED);
      waiter.clearsOnAnswer(setTimeout(() => this.settle(waiter, () => waiter.reject(connecting.error())), connecting.boundMs));
      return;
    }
    this.leave(waiter, answer);
  }

  /**
   * The waiter's attempt is in flight (a blocking wait is cancelled): it is answered once that is back (a grant
   * handed back first), so that nothing of its request is held when the caller hears of it; after a grace if silent.
   */
  private leave(waiter: Waiter<R, H>, answer: () => void): void {
    if (this.state.kind === 'blocking') this.state.cancel.abort();
    waiter.move(leaving(answer));
    waiter.clearsOnAnswer(setTimeout(() => this.settle(waiter, answer), LEAVE_GRACE_MS));
  }

  /** Takes the waiter out of the line, settled: true unless it already was (its answer is then not given again). */
  private finish(waiter: Waiter<R, H>): boolean {
    if (!waiter.settle()) return false;
    const i = this.queue.indexOf(waiter);
    if (i >= 0) this.queue.splice(i, 1);
    this.count.n--;
    return true;
  }

  private settle(waiter: Waiter<R, H>, outcome: () => void): void {
    if (this.finish(waiter)) outcome();
  }

  private settleAndDrive(waiter: Waiter<R, H>, outcome: () => void): void {
    this.settle(waiter, outcome);
    this.drive();
  }

  private notifyQuiet(): void {
    const waiting = this.onQuiet;
    if (waiting === null) return;
    this.onQuiet = null;
    for (const resolve of waiting) resolve();
  }
}
