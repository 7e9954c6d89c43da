import { AsyncLocalStorage } from 'node:async_hooks';
import type { LockHandle } from './handle.js';

interface Frame {
  readonly owner: object;
  readonly handle: LockHandle;
  readonly parent: Frame | undefined;
}

/** Which locks the current async context holds through a callback (withLock, withLease, ...). */
const frames = new AsyncLocalStorage<Frame>();

/** Runs `fn` in a context that records `handle` as held by `owner` (a locker). */
export function runHolding<T>(owner: object, handle: LockHandle, fn: () => Promise<T>): Promise<T> {
  return frames.run({ owner, handle, parent: frames.getStore() }, fn);
}

/** A lock of `owner` still held by an enclosing callback, if any. */
export function heldInCallback(owner: object): LockHandle | null {
  for (let f = frames.getStore(); f; f = f.parent) {
    if (f.owner === owner && !f.handle.signal.aborted && (f.handle as { held?: boolean }).held !== false) return f.handle;
  }
  return null;
}
