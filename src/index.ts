export { createLocker } from './locker.js';
export type { AcquireOptions, FencedAcquireOptions, LeaseOptions, Locker, LockerOptions } from './locker.js';
export type { Semaphore, SemaphoreAcquireOptions, SemaphoreOptions } from './advisory/index.js';
export type { FencedLockHandle, LockHandle } from './core/index.js';
export { lockKey } from './keys.js';
export type { LockKeyOptions, LockName } from './keys.js';
export {
  DeadlockError,
  InvalidArgumentError,
  LockBudgetError,
  LockerClosedError,
  LockLostError,
  LockTableFullError,
  LockTimeoutError,
  LockUnavailableError,
  NestedLockError,
  NotInTransactionError,
  PgfenceError,
  PooledConnectionError,
  StaleTokenError,
  TransactionAbortedError,
} from './core/index.js';
export { PGFENCE_ERROR_CODES } from './core/index.js';
export type { PgfenceErrorCode } from './core/index.js';
export type { LockEventInfo, LockKind, LockLostReason, LockMode } from './core/index.js';
export type { Logger } from './observe/index.js';
export type { Meter } from './observe/index.js';
export type {
  AcquiredEvent,
  BounceEvent,
  ContentionEvent,
  LockerEvents,
  LockerStats,
  LostEvent,
  ReleasedEvent,
  TimeoutEvent,
} from './observe/index.js';
export { tryXactLock, xactLock } from './advisory/index.js';
export type { FencedXactLockOptions, FencedXactLockResult, XactLockOptions, XactLockResult } from './advisory/index.js';
export { fencedClaim, fencedUpdate } from './fencing/index.js';
export type { FencedUpdateResult, FencedUpdateSpec } from './fencing/index.js';
export type { FencedClaimResult, FencedClaimSpec } from './fencing/index.js';
export { fencingColumnSql, versionColumnSql, versionedUpdate } from './fencing/index.js';
export type { FencingColumnOptions, VersionColumnOptions, VersionedUpdateResult, VersionedUpdateSpec } from './fencing/index.js';
export type { LeaseHandle } from './lease/index.js';
export type { DemotedEvent, DemotionReason, ElectedEvent, LeaderElection, LeaderEvents, WhenElectedOptions } from './lease/index.js';
export { migrate } from './migrate/index.js';
export type { MigrateOptions, MigrateResult } from './migrate/index.js';
export type { LeaseEntry, LockEntry, LockReport, ReplicationReport, StandbyEntry } from './observe/index.js';
