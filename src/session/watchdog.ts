import { MAX_TIMER_MS } from '../core/index.js';

/**
 * One timer, set for the next moment its owner must act. A timer already set for an earlier moment is
 * kept (the owner sets it again when it fires early): moving it costs a timer only when the next
 * moment comes sooner.
 */
export class Watchdog {
  private timer: NodeJS.Timeout | null = null;
  private due = Infinity;

  constructor(private readonly fire: () => void) {}

  /** Sets the timer for `due` (a performance.now() time), unless it is set for an earlier moment. */
  setFor(due: number): void {
    if (this.timer && this.due <= due) return;
    if (due === Infinity) return; // nothing to wait for (an unbounded blocking wait): set again when it ends
    if (this.timer) clearTimeout(this.timer);
    this.due = due;
    // Node caps one timer at ~24.8 days: a later moment is reached in steps (the owner sets it again).
    this.timer = setTimeout(this.onTimer, Math.min(MAX_TIMER_MS, Math.max(0, Math.ceil(due - performance.now()))));
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  private readonly onTimer = (): void => {
    this.timer = null;
    this.due = Infinity;
    this.fire();
  };
}
