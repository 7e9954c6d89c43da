import { AsyncLocalStorage } from 'node:async_hooks';
import type { LockHandle } from '../core/index.js';

interface Frame {
  readonly owner: object;
  readonly handle: LockHandle;
  readonly parent: Frame | undefined;
  /** Who runs the callback, for error messages (say, "a workWithLock handler"); default "a callback". */
  readonly context?: string;
}

/** Which locks the current async context holds through a callback (withLock, withLease, ...). */
const frames = new AsyncLocalStorage<Frame>();

/** Runs `fn` in a context that records `handle` as held by `owner` (a locker). */
export function runHolding<T>(owner: object, handle: LockHandle, fn: () => Promise<T>, context?: string): Promise<T> {
  return frames.run({ owner, handle, parent: frames.getStore(), context }, fn);
}

/** A lock of `owner` still held by an enclosing callback (and who runs that callback), if any. */
export function heldInCallback(owner: object): { handle: LockHandle; context: string | undefined } | null {
  for (let f = frames.getStore(); f; f = f.parent) {
    if (f.owner === owner && !f.handle.signal.aborted && (f.handle as { held?: boolean }).held !== false) {
      return { handle: f.handle, context: f.context };
    }
  }
  return null;
}
