import { type Cancel, LockerClosedError, LockLostError, type LockMode, LockTimeoutError, LockUnavailableError, PgfenceError, setLongTimeout } from '../core/index.js';
import type { Observer } from '../observe/index.js';
import { Op, type OpCode } from './advisory-sql.js';
import { type ReleaseListener, type Session, SessionLostError, type SessionPool } from '../session/index.js';
import { type Attempt, type AttemptPhase, type BlockingWaits, type Busy, type LocalHolders, WaitCount, WaitLine, type WaitStrategy } from '../wait/index.js';
import type { BlockingWait } from './blocking-wait.js';
import type { AcquireRequest, AdvisoryLockHandle } from './advisory-lock.js';
import { decodeTryResult, decodeUnlockResult, tryGranted } from './op-result.js';

/** A marker registration that collided with a release probe is retried this soon. */
const REREGISTER_MS = 5;
/** After seeing a key busy, this locker's fresh tries stand back for waiters elsewhere this long. */
const CONTENDED_MS = 1000;

/** What a key's lock needs of its manager. */
export interface KeyLockContext {
  readonly sessions: SessionPool;
  readonly listener: ReleaseListener;
  readonly observer: Observer;
  /** Extra time a blocked wait's answer (or a connection) may take. */
  readonly deadlineMs: number;
  readonly closed: boolean;
  readonly waitCount: WaitCount;
  readonly blocking: BlockingWait;
  newHandle(request: AcquireRequest, session: Session, token: bigint | null): AdvisoryLockHandle;
  expire(handle: AdvisoryLockHandle): void;
  /** `n` more (or fewer) holders. */
  heldDelta(n: number): void;
  idle(lock: KeyLock): void;
}

/**
 * One key's session lock in this locker: the local holders (several shared holders share one server
 * hold), the release() calls waiting for the unlock, and the line of local waiters, which this plugs
 * its tries (the line's strategy), its blocking waits and its local holders (unlocks, local sharing) into.
 * The line runs them one at a time.
 */
export class KeyLock
  implements WaitStrategy<AcquireRequest, AdvisoryLockHandle>, BlockingWaits<AcquireRequest, AdvisoryLockHandle>, LocalHolders<AcquireRequest, AdvisoryLockHandle>
{
  /** The mode this process holds the key in on the server, or null. */
  heldMode: LockMode | null = null;
  /** The session that holds it. */
  session: Session | null = null;
  readonly holders = new Set<AdvisoryLockHandle>();
  /** release() calls waiting for the unlock to complete. */
  private releaseWaiters: { handle: AdvisoryLockHandle; resolve: (released: boolean) => void }[] = [];
  /** Until when fresh tries and local shared grants defer to waiters elsewhere (set when a release found some). */
  private contendedUntil = 0;
  readonly line: WaitLine<AcquireRequest, AdvisoryLockHandle>;
  readonly announcesInAttempt = true;
  /** The session the last try went to (is it still connecting?). */
  private attemptSession: Session | null = null;

  constructor(
    readonly key: bigint,
    private readonly ctx: KeyLockContext,
  ) {
    this.line = new WaitLine(key, ctx.sessions, ctx.listener, this, ctx.waitCount, this, this);
  }

  get releasing(): boolean {
    return this.releaseWaiters.length > 0;
  }

  // ---- the line's strategy ----

  attempt(request: AcquireRequest, phase: AttemptPhase): Promise<Attempt<AdvisoryLockHandle>> {
    let session: Session;
    try {
      // A key waits and is tried where its marker is, so that its own marker never stands in its way.
      session = phase.markerSession ?? this.ctx.sessions.lockSessionFor(this.key, request.bulk === true);
    } catch (err) {
      return Promise.reject(new LockerClosedError('the locker is closed', { cause: err }));
    }
    this.attemptSession = session;
    const code = this.tryCode(request.mode === 'shared', phase, session);
    // Callbacks rather than an async function awaiting the session: one promise per attempt, not three.
    return new Promise((resolve, reject) => {
      const answered = (result: number, token: bigint | null) => {
        try {
          resolve(this.tried(request, session, code, result, token));
        } catch (err) {
          reject(err);
        }
      };
      const failed = (err: Error) => {
        // The session died under the attempt: try again on its replacement.
        if (err instanceof SessionLostError && err.connected && !this.ctx.closed) resolve({ retry: true });
        else reject(err instanceof PgfenceError ? err : new LockUnavailableError(err.message, { cause: err }));
      };
      if (request.fencing) session.runFenced(code, this.key).then(({ result, token }) => answered(result, token), failed);
      else session.submit(code, this.key, (result) => answered(result, null), failed);
    });
  }

  /** What a try on `session` answered: a grant, or what it found busy. */
  private tried(request: AcquireRequest, session: Session, code: OpCode, result: number, token: bigint | null): Attempt<AdvisoryLockHandle> {
    const outcome = decodeTryResult(code, result);
    const announcedOn = outcome.markerRegistered ? session : undefined;
    if (outcome.granted) return { granted: this.taken(request, session, token), announcedOn };
    this.contendedUntil = performance.now() + CONTENDED_MS;
    const retryInMs = outcome.markerFailed ? REREGISTER_MS : undefined;
    return { busy: true, stoodBack: outcome.stoodBack, leaseHeld: outcome.leaseHeld, retryInMs, announcedOn };
  }

  private tryCode(shared: boolean, phase: AttemptPhase, session: Session): OpCode {
    if (!phase.waiting) {
      const polite = this.contendedUntil !== 0 && this.contendedUntil > performance.now();
      return polite ? (shared ? Op.politeTryShared : Op.politeTryExclusive) : shared ? Op.tryShared : Op.tryExclusive;
    }
    if (phase.markerSession === session) return shared ? Op.tryShared : Op.tryExclusive;
    // Having stood back for other waiters, announce and look again politely: a release in between is not missed.
    if (phase.last?.stoodBack) return shared ? Op.waitPoliteTryShared : Op.waitPoliteTryExclusive;
    return shared ? Op.waitTryShared : Op.waitTryExclusive;
  }

  /** Nothing of this key is held, in flight, announced or lately contended here: a bulk try may go straight to the session. */
  get quiet(): boolean {
    return this.heldMode === null && !this.releasing && this.line.quiet && (this.contendedUntil === 0 || this.contendedUntil <= performance.now());
  }

  /** A bulk try (AdvisoryLockManager.tryMany) of a quiet key on `session`: its op code. */
  bulkTryCode(request: AcquireRequest): OpCode {
    return request.mode === 'shared' ? Op.tryShared : Op.tryExclusive;
  }

  /** What a bulk try answered: a holder for `request`, or null (busy, or a live lease holds the name). */
  bulkTried(request: AcquireRequest, session: Session, result: number): AdvisoryLockHandle | null {
    if (tryGranted(result)) return this.taken(request, session, null);
    this.contendedUntil = performance.now() + CONTENDED_MS;
    return null;
  }

  /** Seen busy lately: a fresh request goes straight into PostgreSQL's queue (one statement, not a try and then the wait). */
  blockFirst(request: AcquireRequest): boolean {
    return request.timeoutMs > 0 && this.contendedUntil > performance.now();
  }

  /** Waits on the waiter session; never for a live lease of the name (PostgreSQL would grant the key at once, again and again). */
  block(request: AcquireRequest, remainingMs: number, last: Busy | null, cancel: Cancel): Promise<Attempt<AdvisoryLockHandle>> | null {
    if (last?.leaseHeld) return null;
    return this.ctx.blocking.block(this, request, remainingMs, cancel);
  }

  /** The server granted the key on `session`: a holder for `request`. */
  taken(request: AcquireRequest, session: Session, token: bigint | null): AdvisoryLockHandle {
    this.hold(request.mode, session);
    return this.addHolder(request, token);
  }

  /** Nobody here holds it any more: give the server hold back, then `done`. */
  chore(done: () => void): boolean {
    if (!this.heldMode || this.holders.size > 0) return false;
    this.unlock(done);
    return true;
  }

  heldHere(): boolean {
    return this.heldMode !== null && this.holders.size > 0;
  }

  /** Local shared holders admit a shared request at the head of the line, unless others wait elsewhere. */
  canShare(request: AcquireRequest): boolean {
    return this.heldMode === 'shared' && request.mode === 'shared' && this.contendedUntil < performance.now();
  }

  share(request: AcquireRequest): AdvisoryLockHandle {
    return this.addHolder(request, null);
  }

  /** A late grant: nothing of it is kept. */
  giveBack(handle: AdvisoryLockHandle): Promise<void> {
    this.dropHolder(handle);
    return new Promise((resolve) => this.chore(resolve) || resolve());
  }

  /** The first try is on its way over a session that is still connecting: its answer decides, within deadlineMs. */
  connecting(_request: AcquireRequest, startedAt: number): { boundMs: number; error(): Error } | null {
    if (this.attemptSession?.state.kind !== 'connecting') return null;
    const { deadlineMs } = this.ctx;
    return {
      boundMs: deadlineMs,
      // The server has not answered the connection attempt (a failed attempt rejects at once, with its own error).
      error: () =>
        new LockUnavailableError(`could not connect to PostgreSQL within ${Math.round(deadlineMs)} ms`, {
          cause: new Error(
            `no answer to the connection attempt after ${Math.round(performance.now() - startedAt)} ms ` +
              `(the server or the network is slow or down; the attempt itself gives up after ${deadlineMs} ms)`,
          ),
        }),
    };
  }

  granted(request: AcquireRequest, handle: AdvisoryLockHandle, waitMs: number): void {
    if (request.ttlMs !== undefined) handle.cancelTtl = setLongTimeout(() => this.ctx.expire(handle), request.ttlMs, true);
    this.ctx.observer.acquired(handle, waitMs);
  }

  contention(request: AcquireRequest): void {
    this.ctx.observer.contention(lockInfo(request));
  }

  timeout(request: AcquireRequest, waitMs: number): void {
    this.ctx.observer.timeout(lockInfo(request), waitMs);
  }

  timeoutError(request: AcquireRequest): Error {
    return new LockTimeoutError(request.target.name, request.target.key, request.timeoutMs, request.kind);
  }

  idle(): void {
    this.ctx.idle(this);
  }

  // ---- holders ----

  /**
   * A holder lets go: `done(true)` at once (synchronously) while other local holders keep the hold, else
   * once the unlock is done, with whether the lock was still held. A callback: acquireAll's release
   * lets go of thousands at once without a promise each.
   */
  release(handle: AdvisoryLockHandle, done: (released: boolean) => void): void {
    this.dropHolder(handle);
    this.ctx.observer.released(handle);
    if (this.holders.size > 0) return done(true);
    this.releaseWaiters.push({ handle, resolve: done });
    this.line.kick();
  }

  /** The session that held the key is gone, and the hold with it. */
  sessionLost(err: Error): void {
    const holders = [...this.holders];
    this.hold(null, null);
    for (const h of holders) this.lose(h, 'session-lost', err);
    this.settleReleases(false, err);
    this.line.kick();
  }

  lose(handle: AdvisoryLockHandle, reason: 'session-lost' | 'ttl-expired', cause?: unknown): void {
    const err = new LockLostError(handle.name, handle.key, reason, { cause });
    if (!handle.markLost(err)) return;
    this.dropHolder(handle);
    this.ctx.observer.lost(handle, handle.holdMs, reason, err);
  }

  /**
   * Sets (or clears) the server hold; the session pool counts holds per session from here, not by a scan
   * (until the unlock is done: a blocking wait must not go to a session with an unlock still to send).
   */
  private hold(mode: LockMode | null, session: Session | null): void {
    const before = this.heldMode !== null ? this.session : null;
    const after = mode !== null ? session : null;
    if (before !== after) {
      if (before) this.ctx.sessions.noteHolds(before.id, -1);
      if (after) this.ctx.sessions.noteHolds(after.id, 1);
    }
    this.heldMode = mode;
    this.session = session;
  }

  private addHolder(request: AcquireRequest, token: bigint | null): AdvisoryLockHandle {
    const handle = this.ctx.newHandle(request, this.session!, token);
    this.holders.add(handle);
    this.ctx.heldDelta(1);
    return handle;
  }

  private dropHolder(handle: AdvisoryLockHandle): void {
    if (!this.holders.delete(handle)) return;
    handle.cancelTtl?.();
    this.ctx.heldDelta(-1);
  }

  /** Gives the server hold back, then `finished` (never synchronously: the session answers later). */
  private unlock(finished: () => void): void {
    const session = this.session!;
    const code = this.heldMode === 'shared' ? Op.unlockShared : Op.unlockExclusive;
    const done = (result: number, lostCause?: Error) => {
      if (this.session === session) this.hold(null, null);
      const unlocked = decodeUnlockResult(result);
      if (unlocked.waitersNotified) this.contendedUntil = performance.now() + CONTENDED_MS;
      // Not released: the backend no longer held it (the lock was lost before this release).
      // The cause only when there is a loss to report: an Error's stack costs more than the rest of a release.
      this.settleReleases(unlocked.released, unlocked.released ? undefined : (lostCause ?? new Error('the session no longer held the lock')));
      finished();
    };
    // A failed unlock leaves nothing held: the session is gone, or reconciliation undid it. A dead session
    // cannot say whether the lock lasted until the unlock: that release is a loss.
    session.submit(code, this.key, done, (err) => (err instanceof SessionLostError ? done(0, err) : done(1)));
  }

  /** Answers the release() calls waiting on the key's unlock; when the lock was gone, each one's signal aborts. */
  private settleReleases(released: boolean, cause?: unknown): void {
    const waiters = this.releaseWaiters;
    this.releaseWaiters = [];
    for (const { handle, resolve } of waiters) {
      if (!released) {
        const err = new LockLostError(handle.name, handle.key, 'session-lost', { cause });
        if (handle.markLostOnRelease(err)) this.ctx.observer.lost(handle, handle.holdMs, 'session-lost', err);
      }
      resolve(released);
    }
  }
}

function lockInfo(request: AcquireRequest) {
  return { kind: request.kind ?? 'lock', name: request.target.name, key: request.target.key, mode: request.mode };
}
