/**
 * The seam every lock kind plugs into the exploration through: one module per kind (session,
 * fenced, xact on pg and on Kysely, lease, semaphore, leader, the SQL interface). A kind says what
 * its lock is (family, modes, tokens), what it promises under faults, and how to take, hold and give
 * back one lock; the actor host (../actor.ts) does the rest: recording, acting, timing, errors.
 * A new kind (lease-backed permits, a pooled locker) is a module like these, listed in ./index.ts.
 */
import pg from 'pg';
import { ANSWER_GRACE_MS } from '../../../src/advisory/xact.js';
import { createLocker, type LockHandle, type Locker } from '../../../src/index.js';
import type { Family, FaultType, Mode } from '../history.js';

export interface KindContext {
  /** Where this actor's locker connects (perhaps through the fault proxy), its application_name set. */
  url: string;
  /** Straight to the database (fenced writes of kinds that write apart from their lock). */
  directUrl: string;
  /** Unique per actor incarnation: finds (and kills) its backends. */
  appName: string;
  /** Lease owner of this actor: finds its lease rows. */
  owner: string;
  keepaliveMs: number;
  leaseTtlMs: number;
  /** Semaphores: permits per name. */
  permits: Record<string, number>;
}

export interface AcquireRequest {
  name: string;
  mode: Mode;
  /** null: one try (tryAcquire and its kin). */
  timeoutMs: number | null;
  signal?: AbortSignal;
  /** Called right before the pgfence call, after the kind's own preparation (a connection, BEGIN): the call's time counts from here. */
  started(): void;
}

/** A fenced write's outcome, as fencedUpdate reports it. */
export interface WriteOutcome {
  applied: boolean;
  currentToken?: bigint;
}

export interface KindHold {
  readonly token: bigint | null;
  /** False while the token may still roll back with its transaction. */
  readonly tokenDurable: boolean;
  /**
   * The holder's belief now, read as an application about to act reads it: a loss signal (which
   * checks a lease's deadline on read), or a statement answered in the holding transaction.
   */
  believe(): boolean | Promise<boolean>;
  /** Called at most once, when the kind itself tells its holder the lock is gone. */
  onLost(listener: (reason: string) => void): void;
  /** A fenced write with the hold's token in its own transaction (xact kinds); else the host writes on its pool. */
  write?(write: (executor: WriteExecutor) => Promise<WriteOutcome>): Promise<WriteOutcome>;
  renew?(): Promise<boolean>;
  /** release() and its answer; `durable`: the token is durable now (a committed transaction). */
  release(): Promise<{ released: boolean; durable?: boolean }>;
}

/** What a fenced write runs on: a node-postgres client or pool, or a Kysely transaction. */
export type WriteExecutor = { pg: pg.ClientBase | pg.Pool } | { kysely: unknown };

export interface KindLocker {
  /** A grant, or null when the lock stayed busy (a try, or a timeout that kinds without a typed one report so). */
  acquire(request: AcquireRequest): Promise<KindHold | null>;
  close(): Promise<void>;
}

export interface KindAdapter {
  readonly kind: string;
  readonly family: Family;
  readonly modes: readonly Mode[];
  /** Which operations it has besides acquire and release. */
  readonly supports: { try: boolean; abort: boolean; renew: boolean };
  /** Holds carry fencing tokens (exclusive grants). */
  readonly tokens: boolean;
  /** How long after a fault its holder may still act on a lock it has lost (its documented detection bound). */
  lossWindowMs(keepaliveMs: number): number;
  /** Faults that certainly end its holds: a release after one must answer false. */
  readonly destroyedBy: readonly FaultType[];
  /** Its close ends a connection of the application's own, where a waiting statement runs on until its own timeout. */
  readonly closeEndsConnection?: boolean;
  /**
   * Its waiters' turn in PostgreSQL's queue for the name (docs/concepts.md, "Turns across kinds"): kept
   * while a live lease holds the name, or lost to it. Absent: its waits are not checked for turns.
   */
  readonly turn?: 'kept' | 'lost-to-lease';
  open(ctx: KindContext): Promise<KindLocker>;
}

/** The longest wait an exploration asks for (timeoutMs of acquire). */
export const MAX_WAIT_MS = 3000;

/**
 * The hang guard on the test's own statements (connect, BEGIN, COMMIT, raw SQL, fenced writes): above
 * every bound pgfence keeps itself (an xact statement answers within its wait plus ANSWER_GRACE_MS), as
 * a careful application sets it.
 */
export function statementGuardMs(keepaliveMs: number): number {
  return MAX_WAIT_MS + ANSWER_GRACE_MS + detectionBoundMs(keepaliveMs);
}

/** The documented bound on loss detection (DESIGN.md, Connections): C = K + D + 2·max(10, K/4), D = max(2K, 2000). */
export function detectionBoundMs(keepaliveMs: number): number {
  const deadlineMs = Math.max(2 * keepaliveMs, 2000);
  return keepaliveMs + deadlineMs + 2 * Math.max(10, keepaliveMs / 4);
}

/** Errors of the test's own plumbing (BEGIN, COMMIT, raw SQL), told apart from pgfence's. */
const DRIVER = Symbol('driver error');

export async function driver<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err !== null && typeof err === 'object') (err as Record<symbol, boolean>)[DRIVER] = true;
    throw err;
  }
}

export function isDriverError(err: unknown): boolean {
  return err !== null && typeof err === 'object' && (err as Record<symbol, boolean>)[DRIVER] === true;
}

/** A raw connection's settings for the kinds that talk SQL themselves: every statement bounded client-side. */
export function rawClientConfig(url: string, boundMs: number): pg.ClientConfig {
  return { connectionString: url, connectionTimeoutMillis: boundMs, query_timeout: boundMs };
}

/** The single-shot listener registry every hold uses for onLost. */
export class LossNotice {
  private listener: ((reason: string) => void) | null = null;
  private fired: string | null = null;

  on(listener: (reason: string) => void): void {
    if (this.fired !== null) listener(this.fired);
    else this.listener = listener;
  }

  fire(reason: string): void {
    if (this.fired !== null) return;
    this.fired = reason;
    this.listener?.(reason);
  }

  get lost(): boolean {
    return this.fired !== null;
  }
}

/** A hold backed by a pgfence handle (locks, permits, leases): its signal is the belief and the loss. */
export function handleHold(handle: LockHandle, extra: Partial<KindHold> = {}): KindHold {
  const notice = new LossNotice();
  const signal = handle.signal;
  const lost = () => notice.fire((signal.reason as { reason?: string } | undefined)?.reason ?? 'aborted');
  if (signal.aborted) lost();
  else signal.addEventListener('abort', lost, { once: true });
  return {
    token: handle.token,
    tokenDurable: true,
    // Read the handle's signal each time: a lease's getter checks its deadline as it is read.
    believe: () => !handle.signal.aborted,
    onLost: (listener) => notice.on(listener),
    release: async () => ({ released: await handle.release() }),
    ...extra,
  };
}

/** A pgfence locker for one actor, with the run's keepalive. */
export function actorLocker(ctx: KindContext): Locker {
  return createLocker({ connectionString: ctx.url, keepaliveMs: ctx.keepaliveMs });
}

/** open() of a kind that takes its locks from a pgfence locker of its own: `take` asks for one. */
export function lockerKind(take: (locker: Locker, request: AcquireRequest, ctx: KindContext) => Promise<KindHold | null>): KindAdapter['open'] {
  return async (ctx) => {
    const locker = actorLocker(ctx);
    return {
      acquire: (request) => {
        request.started();
        return take(locker, request, ctx);
      },
      close: () => locker.close(),
    };
  };
}

/** A lock that lives in its session: gone with it (a killed backend, a restart), its loss seen within the detection bound. */
export const SESSION_SCOPED = { lossWindowMs: detectionBoundMs, destroyedBy: ['backend-kill', 'restart'] } satisfies Partial<KindAdapter>;
/** A lease: outlives its session and a restart; its holder stops trusting it before anyone else can get in (no window). */
export const LEASE_SCOPED = { lossWindowMs: () => 0, destroyedBy: [] } satisfies Partial<KindAdapter>;

/** One statement at a time on a connection the kind owns (node-postgres deprecates queued queries). */
export class Serial {
  private tail: Promise<unknown> = Promise.resolve();

  run<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.tail.then(fn, fn);
    this.tail = next.catch(() => {});
    return next;
  }
}

/** A pool for the kinds that hold transactions: every client's socket errors handled (a killed backend is seen at its next statement). */
export function transactionPool(url: string, boundMs: number): pg.Pool {
  const pool = new pg.Pool({ ...rawClientConfig(url, boundMs), max: 2 });
  pool.on('connect', (client) => client.on('error', () => {}));
  pool.on('error', () => {});
  return pool;
}

/** The hold of a transaction lock: held while its transaction answers; released by COMMIT, which makes its token durable. */
export function transactionHold(
  token: bigint | null,
  tx: { ping(): Promise<unknown>; commit(): Promise<unknown>; rollback(): Promise<unknown>; write: KindHold['write'] },
): KindHold {
  const notice = new LossNotice();
  const serial = new Serial();
  let durable = false;
  let ended = false;
  const hold: KindHold = {
    token,
    get tokenDurable() {
      return durable;
    },
    believe: () =>
      serial.run(async () => {
        if (ended) return false;
        try {
          await driver(() => tx.ping());
          return true;
        } catch {
          notice.fire('transaction-lost');
          return false;
        }
      }),
    onLost: (listener) => notice.on(listener),
    write: (write) => serial.run(() => tx.write!(write)),
    release: () =>
      serial.run(async () => {
        if (ended) return { released: false };
        ended = true;
        try {
          await driver(() => tx.commit());
          durable = true;
          return { released: true, durable: true };
        } catch {
          await tx.rollback().catch(() => {});
          return { released: false };
        }
      }),
  };
  return hold;
}
