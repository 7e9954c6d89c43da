import { MAX_TIMER_MS, setLongTimeout, StateMachine } from '../core/index.js';
import type { Busy, LineRequest } from './strategy.js';

/**
 * A waiter's one state (docs/ARCHITECTURE.md, "Wait line and waiter states"):
 * - queued: in its line, it has not found the resource busy yet (its attempts are fresh looks);
 * - waiting: it found the resource busy and waits: in the database's queue, or announced, for a wake-up or its poll;
 * - expired: its time ran out while its first attempt still waited for a connection: that attempt's answer decides;
 * - leaving: it gave up (timeout, abort, close) while its attempt was in flight: it gets `answer` once that attempt
 *   is back (a grant handed back first), or after a grace;
 * - settled: answered, out of the line.
 */
export type WaiterState =
  | { readonly kind: 'queued' }
  | { readonly kind: 'waiting' }
  | { readonly kind: 'expired' }
  | { readonly kind: 'leaving'; readonly answer: () => void }
  | { readonly kind: 'settled' };

/** Which state a waiter may move to from which (Waiter.move refuses any other move). */
export const WAITER_STATES = new StateMachine<WaiterState['kind']>('Waiter', {
  queued: ['waiting', 'expired', 'leaving', 'settled'],
  waiting: ['leaving', 'settled'],
  expired: ['leaving', 'settled'],
  leaving: ['settled'],
  settled: [],
});

// The states without data, made once: an acquire never builds a state object unless it gives up mid-attempt.
export const QUEUED: WaiterState = { kind: 'queued' };
export const WAITING: WaiterState = { kind: 'waiting' };
export const EXPIRED: WaiterState = { kind: 'expired' };
export const SETTLED: WaiterState = { kind: 'settled' };
export const leaving = (answer: () => void): WaiterState => ({ kind: 'leaving', answer });

/** One request in a key's wait line (src/wait/wait-line.ts), from its enqueue to its answer. */
export class Waiter<R, H> {
  private current: WaiterState = QUEUED;
  /** Not a state: a once-only memo (a contention event was reported for it), in whichever state it was met. */
  contended = false;
  /** Not a state: what its last attempt found busy, the input of its next attempt or blocking wait. */
  last: Busy | null = null;

  constructor(
    readonly request: R,
    readonly startedAt: number,
    readonly resolve: (handle: H | null) => void,
    readonly reject: (err: unknown) => void,
    /** Not a state: what to undo once it is answered (its timers, its abort listener), whatever its state. */
    public cleanup: () => void,
  ) {}

  get state(): WaiterState {
    return this.current;
  }

  /** The one way a waiter's state changes: throws IllegalTransitionError on a move WAITER_STATES does not list. */
  move(next: WaiterState): void {
    this.current = WAITER_STATES.transition(this.current, next);
  }

  /** Settled (its timers and abort listener undone): true unless it already was (it is then not answered again). */
  settle(): boolean {
    if (this.current.kind === 'settled') return false;
    this.move(SETTLED);
    this.cleanup();
    return true;
  }

  /** `timer` (a bound on its answer) is cleared once it is answered. */
  clearsOnAnswer(timer: NodeJS.Timeout): void {
    const cleanup = this.cleanup;
    this.cleanup = () => {
      clearTimeout(timer);
      cleanup();
    };
  }
}

/** How many requests wait, over several lines. */
export class WaitCount {
  n = 0;
}

/** What a waiter's timeout and abort call: its line. */
interface GivesUp<W> {
  giveUp(waiter: W, abortReason: unknown): void;
}

/** A waiter's timeout (setTimeout's arguments carry the line and the waiter). */
function giveUpOnTimeout<W>(line: GivesUp<W>, waiter: W): void {
  line.giveUp(waiter, null);
}

/** A waiter for `request` (queued), its timeout and its signal's abort going to `line.giveUp`. */
export function newWaiter<R extends LineRequest, H>(
  line: GivesUp<Waiter<R, H>>,
  request: R,
  resolve: (handle: H | null) => void,
  reject: (err: unknown) => void,
): Waiter<R, H> {
  // The usual timeout (under ~24.8 days) is one plain timer, given the waiter: no closures per acquire.
  const { timeoutMs, signal } = request;
  let timer: NodeJS.Timeout | null = null;
  let cancelLongTimer: (() => void) | null = null;
  const onAbort = signal ? () => line.giveUp(waiter, signal.reason) : null;
  const waiter = new Waiter<R, H>(request, performance.now(), resolve, reject, () => {
    if (timer) clearTimeout(timer);
    cancelLongTimer?.();
    if (onAbort) signal!.removeEventListener('abort', onAbort);
  });
  if (timeoutMs > MAX_TIMER_MS) cancelLongTimer = setLongTimeout(() => line.giveUp(waiter, null), timeoutMs);
  else if (timeoutMs > 0) timer = setTimeout(giveUpOnTimeout, timeoutMs, line, waiter);
  if (onAbort) signal!.addEventListener('abort', onAbort, { once: true });
  return waiter;
}
