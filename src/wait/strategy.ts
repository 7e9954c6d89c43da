import type { Cancel } from '../core/index.js';
import type { Session, StatementText } from '../session/index.js';

/** What every waiting request carries. */
export interface LineRequest {
  /** 0 = one attempt; Infinity = no bound. */
  timeoutMs: number;
  signal: AbortSignal | undefined;
}

/** What a busy attempt learned. */
export interface Busy {
  busy: true;
  /** Look again no later than this (the resource's expiry, a marker to register again). */
  retryInMs?: number;
  /** A polite attempt stood back for waiters elsewhere. */
  stoodBack?: boolean;
  /** A live lease holds the name: wait for its release or expiry, never block on it. */
  leaseHeld?: boolean;
  /** A lock (not a lease) holds the name: a waiter may queue for it in PostgreSQL (see WaiterQueue). */
  lockHeld?: boolean;
}

/**
 * The locker's waiter session, shared by every kind that waits in PostgreSQL's own FIFO queue for a
 * key (session locks, and leases while a lock holds their name): one blocking statement at a time.
 */
export interface WaiterQueue {
  /**
   * Runs `statement` on the waiter session, cancelled when `cancel` aborts, answered within remainingMs
   * plus the locker's deadline; null when the waiter session is not free now (the caller polls then).
   */
  run<R>(statement: StatementText, params: unknown[], remainingMs: number, cancel: Cancel): { session: Session; rows: Promise<R[]> } | null;
}

/**
 * What one attempt found: a grant, a busy resource, or nothing learned (the session died under it:
 * look again at once). `announcedOn`: the attempt registered the line's marker on that session.
 */
export type Attempt<H> = ({ granted: H } | Busy | { retry: true }) & {
  announcedOn?: Session;
  /** A blocking wait found the resource busy (reported as contention if its waiter had not been yet). */
  contended?: boolean;
};

/** Where the head of a line stands when it attempts. */
export interface AttemptPhase {
  /** It has found the resource busy before and announced its wait (false: a fresh request's first look). */
  waiting: boolean;
  /** The session holding the line's marker, or null. */
  markerSession: Session | null;
  /** What its previous attempt found, if it found the resource busy. */
  last: Busy | null;
}

/**
 * What a line asks of every kind of resource it waits for: one attempt for its head, the give-back of a
 * late grant, the reports. A kind that can do more gives its line a capability too: BlockingWaits, LocalHolders.
 */
export interface WaitStrategy<R extends LineRequest, H> {
  /** One attempt for the head of the line. */
  attempt(request: R, phase: AttemptPhase): Promise<Attempt<H>>;
  /** A grant arrived for a waiter that had already given up: hand it back (resolves once it is back). */
  giveBack(handle: H): Promise<unknown>;
  granted(request: R, handle: H, waitMs: number): void;
  contention(request: R): void;
  timeout(request: R, waitMs: number): void;
  timeoutError(request: R): Error;
  /** The line has nothing to do: no waiter, nothing in flight, no marker. */
  idle(): void;
}

/** A kind that can wait in the database's own FIFO queue (session locks; leases while a lock holds their name). */
export interface BlockingWaits<R extends LineRequest, H> {
  /**
   * Waits in the database's own queue for at most remainingMs, or null when it cannot now (the line then
   * announces and polls). `cancel` aborts when the waiter gives up or the line closes.
   */
  block(request: R, remainingMs: number, last: Busy | null, cancel: Cancel): Promise<Attempt<H>> | null;
  /**
   * A fresh request may skip its first attempt and go straight to `block` (which then tries first and
   * says whether it waited): the resource was busy lately, so a try would most likely fail.
   */
  blockFirst(request: R): boolean;
  /** The first attempt of `request` is still waiting for a connection: its first answer decides, within boundMs. */
  connecting?(request: R, startedAt: number): { boundMs: number; error(): Error } | null;
}

/** A kind whose holders in this process stand in the line (session locks: local holders share one server hold). */
export interface LocalHolders<R extends LineRequest, H> {
  /** This process holds the resource (so a request waits behind local holders). */
  heldHere(): boolean;
  /** The local holders admit `request` at the head of the line (local shared holders share one hold). */
  canShare(request: R): boolean;
  /** Grants `request` the hold this process has (only when canShare). */
  share(request: R): H;
  /**
   * Starts work the key needs before its line is served (run one at a time with attempts), and calls
   * `done` once it is over, never synchronously; false when there is none now (`done` is not called).
   * A callback, not a promise: every release of a session lock runs one.
   */
  chore(done: () => void): boolean;
  /** Attempts register the marker themselves (else the line registers it when the head starts to wait). */
  readonly announcesInAttempt: boolean;
}
