/** Abort signals and timers: the one way pgfence combines signals, sleeps and bounds a wait. */
import { setTimeout as delay } from 'node:timers/promises';

/** The longest delay one Node timer takes (~24.8 days); longer ones fire at once, with a warning. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * A signal that aborts when any of `signals` does, with that signal's reason. Undefined entries are
 * skipped; a single signal is returned as it is.
 */
export function anySignal(...signals: (AbortSignal | undefined)[]): AbortSignal {
  const present = signals.filter((s): s is AbortSignal => s !== undefined);
  if (present.length === 1) return present[0]!;
  // AbortSignal.any arrived in Node 20.3; engines allows 20.0.
  const native = (AbortSignal as { any?: (signals: AbortSignal[]) => AbortSignal }).any;
  if (native) return native.call(AbortSignal, present);
  const controller = new AbortController();
  const aborted = present.find((s) => s.aborted);
  if (aborted) {
    controller.abort(aborted.reason);
    return controller.signal;
  }
  // The listeners go with the first abort (their own `signal` option removes them).
  for (const s of present) s.addEventListener('abort', () => controller.abort(s.reason), { once: true, signal: controller.signal });
  return controller.signal;
}

/**
 * The cancel of one of pgfence's own waits (a blocking statement, a queued lease): what an AbortController
 * does for it, without the EventTarget and the signal object each wait would otherwise make (they showed
 * in the contended profile). Listeners run once, in the order added; one added after the abort never runs.
 */
export class Cancel {
  aborted = false;
  private listeners: (() => void)[] = [];

  onAbort(listener: () => void): void {
    if (!this.aborted) this.listeners.push(listener);
  }

  off(listener: () => void): void {
    const i = this.listeners.indexOf(listener);
    if (i >= 0) this.listeners.splice(i, 1);
  }

  abort(): void {
    if (this.aborted) return;
    this.aborted = true;
    const listeners = this.listeners;
    this.listeners = [];
    for (const listener of listeners) listener();
  }
}

/** setTimeout for any duration (Node caps a single timer at ~24.8 days); returns a cancel function. */
export function setLongTimeout(fn: () => void, ms: number, unref = false): () => void {
  if (ms === Infinity) return () => {};
  let timer: NodeJS.Timeout;
  const arm = (left: number) => {
    timer = setTimeout(left > MAX_TIMER_MS ? () => arm(left - MAX_TIMER_MS) : fn, Math.min(left, MAX_TIMER_MS));
    if (unref) timer.unref();
  };
  arm(ms);
  return () => clearTimeout(timer);
}

/** Waits `ms` (any duration), or less when `signal` aborts; never rejects: for loops that check the signal themselves. */
export async function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  if (signal?.aborted) return;
  if (ms <= MAX_TIMER_MS) {
    await delay(ms, undefined, signal ? { signal } : undefined).catch(() => {}); // an abort ends the sleep early
    return;
  }
  await new Promise<void>((resolve) => {
    const cancel = setLongTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
    function done() {
      cancel();
      signal?.removeEventListener('abort', done);
      resolve();
    }
  });
}

/** What {@link within} resolves with when the bound passed first. */
export const TIMED_OUT: unique symbol = Symbol('timed out');

/**
 * `promise`'s value, or TIMED_OUT once `ms` pass first (a bound on a wait that must not hang, such as
 * a shutdown). A rejection of `promise` rejects. The timer goes as soon as either settles.
 */
export async function within<T>(promise: Promise<T>, ms: number): Promise<T | typeof TIMED_OUT> {
  const bound = new AbortController();
  try {
    return await Promise.race([promise, delay(Math.min(ms, MAX_TIMER_MS), TIMED_OUT, { signal: bound.signal })]);
  } finally {
    bound.abort();
  }
}

/** `promise`, or a rejection with `late()` once `ms` pass first (a hang guard on one answer). */
export async function withDeadline<T>(promise: Promise<T>, ms: number, late: () => Error): Promise<T> {
  const result = await within(promise, ms);
  if (result === TIMED_OUT) throw late();
  return result;
}
