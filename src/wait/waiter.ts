import type { Busy } from './strategy.js';

/** One request in a key's wait line (src/wait/wait-line.ts), from its enqueue to its answer. */
export interface Waiter<R, H> {
  readonly request: R;
  readonly startedAt: number;
  /** Has found the resource busy: it now waits for a wake-up, announced by a marker. */
  waiting: boolean;
  /** A contention event was reported for it. */
  contended: boolean;
  settled: boolean;
  /** Its timeout passed while its first attempt waited for a connection: that attempt's answer decides. */
  expired: boolean;
  /** What its last attempt found busy. */
  last: Busy | null;
  /** Gave up while its attempt was in flight: the answer it gets once that attempt is back (see giveUp). */
  leaving: (() => void) | null;
  resolve(handle: H | null): void;
  reject(err: unknown): void;
  cleanup: () => void;
}

/** How many requests wait, over several lines. */
export class WaitCount {
  n = 0;
}

/** A waiter's timeout (setTimeout's arguments carry the line and the waiter). */
export function giveUpOnTimeout<W>(line: { giveUp(waiter: W, abortReason: unknown): void }, waiter: W): void {
  line.giveUp(waiter, null);
}
