import type { LockEventInfo, LockLostError, LockLostReason } from '../core/index.js';

/** The payloads of a locker's events, and its stats: what the observer, the meter and listeners share. */
export interface AcquiredEvent extends LockEventInfo {
  token: bigint | null;
  waitMs: number;
}
export interface ReleasedEvent extends LockEventInfo {
  token: bigint | null;
  holdMs: number;
}
export interface TimeoutEvent extends LockEventInfo {
  waitMs: number;
}
export interface LostEvent extends LockEventInfo {
  token: bigint | null;
  holdMs: number;
  reason: LockLostReason;
  error: LockLostError;
}
export type ContentionEvent = LockEventInfo;
/** A pg-boss job whose key was busy went back to pg-boss (pgfence/pg-boss's KeyBusyError). */
export interface BounceEvent extends LockEventInfo {
  queue: string;
  jobId: string;
  /** How long the job waited for its key; null when an earlier job of its batch found the key busy. */
  waitMs: number | null;
}

/** A locker's events and their payloads (`locker.on('lost', (ev) => ...)` is typed by this). */
export interface LockerEvents {
  acquired: [event: AcquiredEvent];
  released: [event: ReleasedEvent];
  timeout: [event: TimeoutEvent];
  lost: [event: LostEvent];
  contention: [event: ContentionEvent];
  /** From pgfence/pg-boss: a job went back to pg-boss because its key was busy. */
  bounce: [event: BounceEvent];
}

/** Counters since the locker was created, plus what is held and waiting now. */
export interface LockerStats {
  acquired: number;
  released: number;
  timeouts: number;
  lost: number;
  contention: number;
  held: number;
  waiting: number;
  sessions: number;
}
