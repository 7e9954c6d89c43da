/**
 * What an exploration records: every call (invocation and completion), every grant and how it ended,
 * the moments a holder acted on its belief that it held the lock, fenced writes, faults, and what the
 * database held after a close. Times are on one clock shared by every process of the host (now()).
 */

/** Milliseconds on CLOCK_MONOTONIC, which every process of the host reads alike (hrtime), unlike Date.now(). */
export function now(): number {
  return Number(process.hrtime.bigint()) / 1e6;
}

export type Mode = 'exclusive' | 'shared';
/** What a kind's lock is, for the exclusion rules: one name is one lock across families. */
export type Family = 'session' | 'xact' | 'lease' | 'permit';
export type FaultType = 'backend-kill' | 'stall' | 'blackhole' | 'sigstop' | 'sigkill' | 'restart';
export type OpName = 'open' | 'acquire' | 'try' | 'release' | 'renew' | 'write' | 'close';

export interface ErrorInfo {
  name: string;
  code?: string;
  message: string;
  /** instanceof PgfenceError in the process that caught it. */
  typed: boolean;
  /** Who threw: pgfence's API ('pgfence'), the test's own plumbing on a driver ('driver'), or the caller's abort reason ('caller'). */
  origin: 'pgfence' | 'driver' | 'caller';
}

export interface OpRecord {
  id: string;
  actor: string;
  kind: string;
  op: OpName;
  name?: string;
  mode?: Mode;
  timeoutMs?: number;
  abortAfterMs?: number;
  invokedAt: number;
  /** The call must settle within invokedAt + boundMs (plus any time its process was stopped). */
  boundMs: number;
  /**
   * acquire/try: when the pgfence call was made, after the kind's own preparation (a pool connection,
   * BEGIN); invokedAt is moved to it. Absent while that preparation runs: a call unsettled without it
   * never reached pgfence.
   */
  calledAt?: number;
  settledAt?: number;
  /** 'killed': its process was SIGKILLed before it answered. */
  outcome?: 'ok' | 'null' | 'error' | 'killed';
  /** release(), renew(): what it answered. */
  value?: boolean;
  /** acquire/try: the grant it returned. */
  hold?: string;
  error?: ErrorInfo;
}

export interface HoldRecord {
  id: string;
  actor: string;
  kind: string;
  family: Family;
  /** The lock's name: one namespace for every family but 'permit', whose names are semaphores. */
  name: string;
  mode: Mode;
  token: bigint | null;
  /** A transaction lock's token is durable only once its transaction committed. */
  tokenDurable: boolean;
  requestedAt: number;
  grantedAt: number;
  /** When the holder let go or learnt it had nothing: release invoked, loss seen, close invoked, process killed. */
  endedAt?: number;
  end?: 'released' | 'lost' | 'closed' | 'killed';
  /** What release() answered (undefined: not released). */
  released?: boolean;
  releaseInvokedAt?: number;
  /** When release() answered (a lease freed by it was freed by then). */
  releaseSettledAt?: number;
  lostAt?: number;
  lostReason?: string;
}

/** The holder believed it held the lock at some instant within [from, to] (a signal read, or a statement answered in its transaction). */
export interface ActRecord {
  hold: string;
  from: number;
  to: number;
}

export interface WriteRecord {
  id: string;
  hold: string;
  name: string;
  token: bigint;
  invokedAt: number;
  settledAt?: number;
  applied?: boolean;
  currentToken?: bigint;
}

/** A row of the database's own log of applied fenced writes (a trigger appends one per row written). */
export interface WriteLogRow {
  seq: number;
  name: string;
  token: bigint;
  writer: string;
}

export interface FaultRecord {
  id: string;
  type: FaultType;
  /** Actors it hits (every actor for a restart). */
  targets: string[];
  at: number;
  /** Healed, resumed, or the restart completed. */
  endedAt?: number;
  /** For a backend kill: the kill returned (the backends had exited). */
  doneAt?: number;
}

/** What the database held for an actor's locker at a check (after its close, or at a quiescent point). */
export interface HeldObservation {
  actor: string;
  kind: string;
  at: number;
  afterClose: boolean;
  /** Advisory locks still granted to its backends, as "key/objsubid". */
  advisory: string[];
  /** Tokens of live lease rows of its owner that no hold of it believes in. */
  leases: string[];
  /** After a close: how long until the database showed nothing (undefined: still something at the end of the wait). */
  clearAfterMs?: number;
}

/**
 * A backend of an actor seen waiting in PostgreSQL's own lock queue for a name's key (pg_locks, not
 * granted), one record per wait (pg_locks.waitstart): polled, so a short wait may go unseen.
 */
export interface QueueSighting {
  actor: string;
  name: string;
  mode: Mode;
  /** When the wait began on the server (waitstart), on this clock: no earlier than enteredFrom, no later than enteredBy. */
  enteredFrom: number;
  enteredBy: number;
  /** The first poll that saw it answered at firstSeenAt; the last one was sent at lastSentAt (it still waited at some moment after). */
  firstSeenAt: number;
  lastSentAt: number;
}

/** Turns across kinds (docs/concepts.md): which kinds' waiters keep their place in PostgreSQL's queue. */
export interface TurnConfig {
  /**
   * Kinds whose waiters are checked, by what a live lease does to a queued one: 'kept', it keeps its
   * place (it holds the name's lock while it looks at the lease: transaction locks, lock_fenced, SQL
   * lease); 'lost-to-lease', a live lease sends it out of the queue (Node session locks and leases),
   * so its wait is judged only while no lease can have held the name.
   */
  kinds: Record<string, 'kept' | 'lost-to-lease'>;
  /** Kinds whose grants are leases (a lease may outlive its holder's belief by its TTL). */
  leaseKinds: string[];
  /**
   * Kinds whose wait with an AbortSignal leaves the queue and enters it again at its end every slice
   * (known, reported: xactLock's 250 ms slices): such a call is judged one wait at a time, not as a whole.
   */
  knownRequeuedWithSignal?: string[];
  leaseTtlMs: number;
}

export interface ExploreConfig {
  seed: number;
  /** How long a holder may act on a lock it has lost after a fault hit it, per kind (the documented detection bound). */
  lossWindowMs: Record<string, number>;
  /** Semaphores: permits per name. */
  permits: Record<string, number>;
  /** Family pairs that do not exclude each other yet (known, being fixed elsewhere): not reported as overlaps. */
  knownNonExclusive: [Family, Family][];
  /** Faults that certainly end a hold of a kind (a release after them must answer false). */
  destroyedBy: Record<string, FaultType[]>;
  /** After close, how long the database may still show an actor's advisory locks before it is a leak (0: none; lease rows: never). */
  closeLingerMs: number;
  /**
   * Kinds whose close ends a connection of the application's own (xact, SQL): a statement still waiting
   * there runs on until its own timeout ends it. How long that may add, per kind.
   */
  statementLingerMs: Record<string, number>;
  /** Kinds known to leave a lease row live for a moment after close() (under investigation): allowed the linger too. */
  leaseLingerKinds?: string[];
  /** Ops whose raw driver errors are known to pass through pgfence (being fixed elsewhere): not reported. */
  knownUntyped: OpName[];
  /** Bounded waiting across kinds (absent: not checked). */
  turns?: TurnConfig;
}

export interface History {
  config: ExploreConfig;
  ops: OpRecord[];
  holds: HoldRecord[];
  acts: ActRecord[];
  writes: WriteRecord[];
  writeLog: WriteLogRow[];
  faults: FaultRecord[];
  held: HeldObservation[];
  /** Actor id -> process id label ('main' or a child), for stop windows. */
  processOf: Record<string, string>;
  /** SIGSTOP windows per process label. */
  stopped: Record<string, { from: number; to: number }[]>;
  /** When the round took the history: a call unsettled then was still pending at this moment. */
  takenAt?: number;
  /** Waits seen in PostgreSQL's lock queue (absent: not watched). */
  queue?: QueueSighting[];
}

/** The records an actor produces, sent as they happen (over IPC from a child); a record is sent again when it changes. */
export type Recorded =
  | { type: 'op'; record: OpRecord }
  | { type: 'hold'; record: HoldRecord }
  | { type: 'act'; record: ActRecord }
  | { type: 'write'; record: WriteRecord };

export function emptyHistory(config: ExploreConfig): History {
  return { config, ops: [], holds: [], acts: [], writes: [], writeLog: [], faults: [], held: [], processOf: {}, stopped: {} };
}
