/**
 * Exit codes of the pgfence command (sysexits.h where one fits). `pgfence run` otherwise exits
 * with its child's code (128 + the signal number when the child died by a signal).
 */
export const EXIT = {
  OK: 0,
  /** A failure: the database refused a statement, a migration failed, ... */
  FAILURE: 1,
  /** EX_USAGE: a bad command line (unknown option, bad duration, no database URL). */
  USAGE: 64,
  /** EX_UNAVAILABLE: the database could not be reached. */
  UNAVAILABLE: 69,
  /** `pgfence run`: the lock was lost while the child ran; the child was stopped (SIGTERM, then SIGKILL). */
  LOCK_LOST: 70,
  /** EX_TEMPFAIL: `pgfence run`: the lock stayed busy for --wait; the command was not run. */
  BUSY: 75,
  /** EX_CONFIG: `pgfence run`: pgfence's schema is missing (run `pgfence migrate`, or pass --no-fencing). */
  NOT_MIGRATED: 78,
  /** `pgfence run`: the command was found but could not be executed (permission denied). */
  CANNOT_EXECUTE: 126,
  /** `pgfence run`: the command was not found. */
  NOT_FOUND: 127,
} as const;
