import { StateMachine } from '../core/index.js';
import type { PinnedConnection } from './connection-source.js';
import type { PendingOp } from './pending-op.js';

/**
 * A Session's one state (src/core/state-machine.ts): each kind carries what exists only in it (the
 * connection once connected, the batch while a statement is out, the cause once dead), and the session
 * changes it only through SESSION_STATES.transition. The queue of pending operations and the times it
 * keeps (last answer, last use) are fields of the session: they are not states.
 */
export type SessionState = Connecting | SettingUp | Idle | Flushing | Reconciling | Dead;
export type SessionStateKind = SessionState['kind'];

/** Opening its connection: operations queue up, nothing is sent. */
export interface Connecting {
  readonly kind: 'connecting';
}

/** A statement out: the operations it carries, when it was sent, and how long the server has to answer it. */
interface Out {
  readonly batch: readonly PendingOp[];
  readonly sentAt: number;
  readonly deadlineMs: number;
}

/**
 * Connected, its setup statement out (`batch` holds it alone). Nothing else is sent until it succeeds: a
 * session is used only after its setup statement succeeded; if it fails, the session dies.
 */
export interface SettingUp extends Out {
  readonly kind: 'settingUp';
  readonly conn: PinnedConnection;
}

/**
 * Set up, nothing out (an operation queued goes out at once). `guarded`: the flavour of its statements, as the setup
 * statement answered (pgfence's schema is there, so tries give way to live leases of the same key); an
 * unguarded session asks again keepaliveMs after `lookedAt` (the schema may be migrated meanwhile).
 */
export interface Idle {
  readonly kind: 'idle';
  readonly conn: PinnedConnection;
  readonly guarded: boolean;
  readonly lookedAt: number;
}

/** A statement out on `idle`'s connection; once it is answered the session is `idle` again. */
export interface Flushing extends Out {
  readonly kind: 'flushing';
  readonly idle: Idle;
}

/**
 * The statement out failed on a live connection: the session undoes what it half did (its operations
 * then fail, with the statement's error, once) and goes back to `idle`.
 */
export interface Reconciling extends Out {
  readonly kind: 'reconciling';
  readonly idle: Idle;
}

/** Ended for good (lost, never connected, setup failed, or closed): `cause`, and the state it ended in. */
export interface Dead {
  readonly kind: 'dead';
  readonly cause: Error;
  readonly diedIn: Exclude<SessionStateKind, 'dead'>;
}

/** The one `connecting` state (it carries nothing). */
export const CONNECTING: Connecting = Object.freeze({ kind: 'connecting' });

/**
 * The moves a session may make. A session connects, sets up, then alternates between idle and flushing
 * (a failed batch passes through reconciling); any state but dead may die.
 */
export const SESSION_STATES = new StateMachine<SessionStateKind>('Session', {
  connecting: ['settingUp', 'dead'],
  settingUp: ['idle', 'dead'],
  idle: ['flushing', 'dead'],
  flushing: ['idle', 'reconciling', 'dead'],
  reconciling: ['idle', 'dead'],
  dead: [],
});

/** The connection of a state that has one. */
export function connectionOf(s: SessionState): PinnedConnection | null {
  switch (s.kind) {
    case 'settingUp':
    case 'idle':
      return s.conn;
    case 'flushing':
    case 'reconciling':
      return s.idle.conn;
    default:
      return null;
  }
}
