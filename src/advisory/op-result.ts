import { MARKER_FAILED } from '../wait/index.js';
import { LEASE_HELD, Op, type OpCode } from './advisory-sql.js';

/** What a try (or a marker registration) answered, read once from the session's result number. */
interface TryResult {
  /** The lock was granted (and is held by the session). */
  granted: boolean;
  /** The op registered this session's marker (a waiter is announced on the key). */
  markerRegistered: boolean;
  /** The op meant to register a marker but collided with a release's probe: register again soon. */
  markerFailed: boolean;
  /** A polite try stood back for waiters of other sessions (it did not try). */
  stoodBack: boolean;
  /** A live lease holds the name: the grant was given back at once. */
  leaseHeld: boolean;
}

/** What an unlock answered. */
interface UnlockResult {
  /** The session held the lock and gave it back (false: it was lost before this release). */
  released: boolean;
  /** Waiters of other sessions were announced, and notified. */
  waitersNotified: boolean;
}

const STOOD_BACK = 4;

function registersMarker(code: OpCode): boolean {
  return (
    code === Op.waitTryExclusive ||
    code === Op.waitTryShared ||
    code === Op.waitPoliteTryExclusive ||
    code === Op.waitPoliteTryShared ||
    code === Op.registerMarker
  );
}

/** Decodes the result of a try or marker op (see the op codes in advisory-sql). */
export function decodeTryResult(code: OpCode, r: number): TryResult {
  const marks = registersMarker(code);
  return {
    granted: tryGranted(r),
    markerRegistered: marks && (r & MARKER_FAILED) === 0,
    markerFailed: marks && (r & MARKER_FAILED) === MARKER_FAILED,
    stoodBack: (r & STOOD_BACK) === STOOD_BACK,
    leaseHeld: (r & LEASE_HELD) === LEASE_HELD,
  };
}

/** Whether a try granted the lock (what a bulk try needs of decodeTryResult, without building it). */
export const tryGranted = (r: number): boolean => (r & 1) === 1;

/** Decodes an unlock's result: 0 = was not held, 1 = released, 3 = released and waiters notified. */
export function decodeUnlockResult(r: number): UnlockResult {
  return { released: r !== 0, waitersNotified: r === 3 };
}

/** A blocking wait's `r`: whether it kept the lock (LEASE_HELD: a live lease of the name made it give the key back). */
export function decodeBlockResult(r: number | undefined): { granted: boolean; leaseHeld: boolean } {
  const leaseHeld = r === LEASE_HELD;
  return { granted: !leaseHeld, leaseHeld };
}
