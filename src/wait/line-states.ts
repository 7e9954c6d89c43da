import { type Cancel, StateMachine } from '../core/index.js';
import type { Session } from '../session/index.js';
import type { AttemptPhase, Busy } from './strategy.js';

/**
 * The head's attempt is in flight: for `waiter`, started in the phase it carries (it is the phase the
 * strategy's attempt gets: one object per attempt); `woken`: a release was announced (or a poll fell due)
 * meanwhile, so a busy answer looks again at once.
 */
export interface AttemptingState<W> extends AttemptPhase {
  readonly kind: 'attempting';
  readonly waiter: W;
  readonly woken: boolean;
}

/** The head waits in the database's own queue: `cancel` ends that wait; `woken` as in AttemptingState. */
export interface BlockingState<W> {
  readonly kind: 'blocking';
  readonly waiter: W;
  readonly cancel: Cancel;
  readonly woken: boolean;
}

/**
 * A wait line's one state (docs/ARCHITECTURE.md, "Wait line and waiter states"):
 * - idle: nothing is in flight for the key and no poll is due: the next serve() decides;
 * - operating: one operation for the key is in flight (a chore, a marker's registration or withdrawal, a
 *   give-back, a bulk try): the line waits for it to end;
 * - attempting: the head's attempt is in flight;
 * - blocking: the head waits in the database's own queue;
 * - polling: the head waits for a wake-up, and `timer` looks again for a release nobody announced.
 */
export type LineState<W> =
  | { readonly kind: 'idle' }
  | { readonly kind: 'operating' }
  | AttemptingState<W>
  | BlockingState<W>
  | { readonly kind: 'polling'; readonly timer: NodeJS.Timeout };

/** Which state a line may move to from which (WaitLine's move refuses any other move). */
export const WAIT_LINE_STATES = new StateMachine<LineState<unknown>['kind']>('WaitLine', {
  idle: ['operating', 'attempting', 'blocking', 'polling'],
  operating: ['idle'],
  // To itself: a wake-up came while it was in flight.
  attempting: ['attempting', 'idle'],
  blocking: ['blocking', 'idle'],
  // Leaving it clears the poll timer: no timer lives outside this state.
  polling: ['idle', 'operating', 'attempting', 'blocking'],
});

// The states without data, made once.
export const IDLE: LineState<never> = { kind: 'idle' };
export const OPERATING: LineState<never> = { kind: 'operating' };

export const attempting = <W>(waiter: W, waiting: boolean, markerSession: Session | null, last: Busy | null): AttemptingState<W> => ({
  kind: 'attempting',
  waiter,
  woken: false,
  waiting,
  markerSession,
  last,
});
export const blocking = <W>(waiter: W, cancel: Cancel): BlockingState<W> => ({ kind: 'blocking', waiter, cancel, woken: false });
export const polling = (timer: NodeJS.Timeout): LineState<never> => ({ kind: 'polling', timer });

/** An operation, an attempt or a blocking wait is in flight: serving waits for it. */
export function inFlight<W>(state: LineState<W>): boolean {
  return state.kind === 'operating' || state.kind === 'attempting' || state.kind === 'blocking';
}

/** The waiter whose attempt or blocking wait is in flight, if any. */
export function attemptFor<W>(state: LineState<W>): W | null {
  return state.kind === 'attempting' || state.kind === 'blocking' ? state.waiter : null;
}
