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

/**
 * The callback a nested request must not wait inside, if any: the nesting rules (docs/concepts.md, "Nesting").
 * A deadlock needs a cycle of holders each waiting for the next, so:
 * - a request that does not wait (a try, timeoutMs 0) closes no cycle: allowed anywhere;
 * - a semaphore permit is a leaf: nothing may wait inside a permit's callback, so waiting for a permit
 *   inside a lock's or a lease's callback cannot close a cycle: allowed;
 * - waiting for a lock or a lease inside any callback of the same locker, or for anything inside a
 *   permit's: refused (the caller can pass allowNested when every caller takes them in one order).
 */
export function nestingConflict(
  owner: object,
  kind: 'lock' | 'lease' | 'semaphore',
  waits: boolean,
): { handle: LockHandle; context: string | undefined } | null {
  if (!waits) return null;
  return heldInCallback(owner, kind === 'semaphore' ? isPermit : anyHandle);
}

// Made once, not per acquire.
const isPermit = (handle: LockHandle) => (handle as { kind?: unknown }).kind === 'semaphore';
const anyHandle = () => true;

/** The innermost lock of `owner` still held by an enclosing callback (and who runs that callback) that `which` picks, if any. */
function heldInCallback(owner: object, which: (handle: LockHandle) => boolean): { handle: LockHandle; context: string | undefined } | null {
  for (let f = frames.getStore(); f; f = f.parent) {
    if (f.owner === owner && !f.handle.signal.aborted && (f.handle as { held?: boolean }).held !== false && which(f.handle)) {
      return { handle: f.handle, context: f.context };
    }
  }
  return null;
}
