import { anySignal, InvalidArgumentError, LockerClosedError, type LockHandle, type LockLostError, type LockLostReason, PgfenceError, sleep } from '../core/index.js';
import { EventEmitter } from 'node:events';
import type { LockerContext } from '../locker-parts.js';
import { internalKey, type LockName, type LockTarget } from '../keys.js';
import { abortSignal, optionKeys, optionsObject } from '../options.js';
import type { Logger } from '../observe/index.js';
import type { LeaseHandle } from './lease-manager.js';
import { LEADER_OPTION_KEYS, leaseRequest, type LeaseOptions } from './lease-options.js';

/** What a leader election needs from its locker. */
interface LeaderCampaignPorts {
  lease(signal: AbortSignal): Promise<LeaseHandle>;
  /**
   * A session lock whose loss ends the term (a killed backend, a lost network), named `name`; null
   * behind a transaction pooler, where a term is the lease alone (a dead leader's successor is
   * elected at its lease's TTL). `signal` aborts its wait (the campaign stops).
   */
  guard(key: bigint, name: string, signal: AbortSignal): Promise<LockHandle | null>;
  logger: Logger;
}

export interface ElectedEvent {
  epoch: bigint;
}
/** Why a term ended: resign(), or why its lease or its session lock was lost. */
export type DemotionReason = 'resigned' | LockLostReason;
export interface WhenElectedOptions {
  signal?: AbortSignal;
}
const WHEN_ELECTED_OPTION_KEYS = optionKeys<WhenElectedOptions>({ signal: true });

export interface DemotedEvent {
  epoch: bigint;
  reason: DemotionReason;
}
/** A leader election's events and their payloads. */
export interface LeaderEvents {
  elected: [event: ElectedEvent];
  demoted: [event: DemotedEvent];
}

/**
 * Lease-based leader election. Each candidate campaigns for the lease of `name`; the holder leads
 * until its lease or its session is lost, or it resigns. The epoch of a term is the lease's fencing
 * token: strictly increasing, so writes guarded with it refuse any earlier leader.
 *
 * 'demoted' is emitted the moment a term ends (a lease's signal aborts before the database would let
 * another candidate in), so at most one candidate believes it leads at any time.
 */
export interface LeaderElection extends EventEmitter<LeaderEvents> {
  readonly name: string | null;
  /**
   * Read when about to act: the lease's local deadline is checked on the monotonic clock as this is
   * read, so a process that was paused past its lease sees false before any timer of its own runs.
   */
  readonly isLeader: boolean;
  /** The epoch of the current term, or null when not leading (checked as isLeader is). */
  readonly epoch: bigint | null;
  /** Aborts when the current term ends; null when not leading (checked as isLeader is). */
  readonly signal: AbortSignal | null;
  /**
   * Resolves with the epoch once this candidate leads (at once if it does).
   *
   * @example
   * ```ts fragment
   * const election = locker.leader('scheduler');
   * const epoch = await election.whenElected({ signal: AbortSignal.timeout(60_000) });
   * ```
   */
  whenElected(opts?: WhenElectedOptions): Promise<bigint>;
  /**
   * Stops campaigning; a leader releases its lease first ('demoted' with reason 'resigned').
   *
   * @example
   * ```ts fragment
   * const election = locker.leader('scheduler');
   * process.once('SIGTERM', () => void election.resign()); // 'demoted' with reason 'resigned'
   * ```
   */
  resign(): Promise<void>;
}

const RETRY_MS = 250;

/** What a locker.leader() campaign takes from its locker: its leases, and the session lock that guards a term. */
interface LeaderLocks {
  lease(opts: LeaseOptions): Promise<LeaseHandle>;
  guard(key: bigint, name: string, signal: AbortSignal): Promise<LockHandle>;
}

/** locker.leader(): its options checked before any I/O, then a campaign started. */
export function startCampaign(
  ctx: LockerContext,
  name: LockName,
  opts: Omit<LeaseOptions, 'timeoutMs' | 'allowNested'> | undefined,
  locks: LeaderLocks,
): LeaderCampaign {
  const o = optionsObject<LeaseOptions>(opts, 'leader options', LEADER_OPTION_KEYS);
  if (o.timeoutMs !== undefined) throw new InvalidArgumentError('timeoutMs', 'a candidate campaigns until it resigns; use whenElected({ signal })');
  const template = leaseRequest(ctx, name, { ...o, timeoutMs: Infinity, allowNested: true }, 'leader');
  ctx.checkOpen();
  const campaign = new LeaderCampaign(template.target, {
    // A campaign may start inside a lock callback: its own locks are not nested in it.
    lease: (signal) => locks.lease({ ...o, timeoutMs: Infinity, allowNested: true, signal: anySignal(signal, template.signal) }),
    // Behind a transaction pooler a term is its lease alone: no session lock can be held there.
    guard: async (key, guardName, signal) => {
      if (ctx.refusal) return null;
      return locks.guard(key, guardName, signal).catch((err: unknown) => {
        if (err === ctx.refusal) return null;
        throw err;
      });
    },
    logger: ctx.logger,
  });
  template.signal?.addEventListener('abort', () => void campaign.resign(), { once: true });
  return campaign;
}


export class LeaderCampaign extends EventEmitter<LeaderEvents> implements LeaderElection {
  private term: { epoch: bigint; lease: LeaseHandle; guard: LockHandle | null; controller: AbortController } | null = null;
  private readonly stop = new AbortController();
  /** Why the campaign stopped: resign(), or its locker closing. */
  private stopReason: 'resigned' | 'closed' = 'resigned';
  private readonly running: Promise<void>;

  constructor(
    private readonly target: LockTarget,
    private readonly ports: LeaderCampaignPorts,
  ) {
    super();
    this.running = this.campaign();
  }

  get name(): string | null {
    return this.target.name;
  }
  get isLeader(): boolean {
    return this.currentTerm() !== null;
  }
  get epoch(): bigint | null {
    return this.currentTerm()?.epoch ?? null;
  }
  get signal(): AbortSignal | null {
    return this.currentTerm()?.controller.signal ?? null;
  }

  /**
   * The term, if it still holds now. Reading the lease's signal checks its deadline on the monotonic
   * clock: after a pause (SIGSTOP, a long GC, a blocked event loop) an application timer may run
   * before pgfence's deadline timer, and it must not see a term that has already run out.
   */
  private currentTerm(): typeof this.term {
    const term = this.term;
    if (term && (term.lease.signal.aborted || term.guard?.signal.aborted)) {
      // The abort listeners normally end the term already; this covers a listener not yet attached.
      const lost = term.lease.signal.aborted || !term.guard ? term.lease.signal : term.guard.signal;
      this.endTerm((lost.reason as LockLostError).reason ?? 'session-lost', lost.reason);
    }
    return this.term;
  }

  whenElected(opts?: WhenElectedOptions): Promise<bigint> {
    let signal: AbortSignal | undefined;
    try {
      signal = abortSignal(optionsObject<WhenElectedOptions>(opts, 'whenElected options', WHEN_ELECTED_OPTION_KEYS).signal);
    } catch (err) {
      return Promise.reject(err);
    }
    const term = this.currentTerm();
    if (term) return Promise.resolve(term.epoch);
    return new Promise((resolve, reject) => {
      const onElected = (ev: ElectedEvent) => {
        cleanup();
        resolve(ev.epoch);
      };
      const onStop = () => {
        cleanup();
        reject(signal?.aborted ? signal.reason : this.stoppedError('before this candidate was elected'));
      };
      const cleanup = () => {
        this.off('elected', onElected);
        this.stop.signal.removeEventListener('abort', onStop);
        signal?.removeEventListener('abort', onStop);
      };
      if (this.stop.signal.aborted || signal?.aborted) return onStop();
      this.on('elected', onElected);
      this.stop.signal.addEventListener('abort', onStop, { once: true });
      signal?.addEventListener('abort', onStop, { once: true });
    });
  }

  resign(): Promise<void> {
    return this.stopCampaign('resigned');
  }

  /** @internal The locker closes: stop as resign() does, and say so. */
  closeWithLocker(): Promise<void> {
    return this.stopCampaign('closed');
  }

  private async stopCampaign(reason: 'resigned' | 'closed'): Promise<void> {
    if (!this.stop.signal.aborted) {
      this.stopReason = reason;
      this.stop.abort();
    }
    this.endTerm(reason);
    await this.running;
  }

  private stoppedError(when: string): PgfenceError {
    return this.stopReason === 'closed'
      ? new LockerClosedError(`the locker was closed ${when}`)
      : new PgfenceError('PGFENCE_RESIGNED', `the election was resigned ${when}`);
  }

  private async campaign(): Promise<void> {
    while (!this.stop.signal.aborted) {
      let lease: LeaseHandle;
      try {
        lease = await this.ports.lease(this.stop.signal);
      } catch (err) {
        if (this.stop.signal.aborted) return;
        this.ports.logger.warn({ err, lock: this.target.name }, 'pgfence: leader campaign failed; retrying');
        await sleep(RETRY_MS, this.stop.signal);
        continue;
      }
      let guard: LockHandle | null;
      try {
        const name = `${this.target.name ?? `key ${this.target.key}`} (leader, epoch ${lease.token})`;
        // Aborted by resign() and close(), as the lease's wait is: neither waits for the guard's.
        guard = await this.ports.guard(internalKey('leader', String(this.target.key), String(lease.token)), name, this.stop.signal);
      } catch (err) {
        await lease.release();
        if (this.stop.signal.aborted) return;
        this.ports.logger.warn({ err, lock: this.target.name }, 'pgfence: leader session unavailable; retrying');
        await sleep(RETRY_MS, this.stop.signal);
        continue;
      }
      const ended = this.beginTerm(lease, guard);
      await ended;
      await Promise.all([guard?.release(), lease.release()]);
      // Give the other candidates a moment before campaigning again.
      await sleep(RETRY_MS * (1 + Math.random()), this.stop.signal);
    }
  }

  /** Leads until the lease or the guard is lost, or resign(); resolves when the term has ended. */
  private beginTerm(lease: LeaseHandle, guard: LockHandle | null): Promise<void> {
    if (this.stop.signal.aborted || lease.signal.aborted || guard?.signal.aborted) return Promise.resolve();
    const controller = new AbortController();
    this.term = { epoch: lease.token, lease, guard, controller };
    // A handle's signal aborts with a LockLostError.
    const onLost = (signal: AbortSignal) => () => this.endTerm((signal.reason as LockLostError).reason ?? 'session-lost', signal.reason);
    lease.signal.addEventListener('abort', onLost(lease.signal), { once: true });
    guard?.signal.addEventListener('abort', onLost(guard.signal), { once: true });
    const ended = new Promise<void>((resolve) => controller.signal.addEventListener('abort', () => resolve(), { once: true }));
    this.emit('elected', { epoch: lease.token } satisfies ElectedEvent);
    return ended;
  }

  private endTerm(reason: DemotionReason, cause?: unknown): void {
    const term = this.term;
    if (!term) return;
    this.term = null;
    term.controller.abort(
      cause ??
        (reason === 'closed'
          ? new LockerClosedError('leadership ended: the locker was closed')
          : new PgfenceError('PGFENCE_RESIGNED', `leadership ended: ${reason}`)),
    );
    this.emit('demoted', { epoch: term.epoch, reason } satisfies DemotedEvent);
  }
}
