/**
 * "pgfence/pg-boss": pg-boss workers whose jobs that share a key never run at the same time.
 *
 * pg-boss is an optional peer: this module never loads it, not even its types. It talks to the boss
 * it is given through the few methods of BossLike (work, fail, the 'stopped' event), which pg-boss
 * 10 and 12 (both tested) and 11 have.
 */
import { InvalidArgumentError, PgfenceError, type FencedLockHandle, type Locker, type LockHandle, type LockLostError } from '../index.js';
import { reportBounce, type BounceReporter } from '../observe/index.js';
import { runHolding } from '../advisory/index.js';
import { anySignal, describeType, jsonCompatible, setLongTimeout } from '../core/index.js';
import { booleanOption, callback, durationMs, objectOption, optionKeys, optionsObject } from '../options.js';

/** A job as pg-boss hands it to a worker (with `includeMetadata`, it carries more fields). */
export interface BossJob<T = object> {
  id: string;
  name: string;
  data: T;
  /** pg-boss 12: aborts when the batch expires, the boss stops or the job's claim is lost. pg-boss 10 and 11 have none. */
  signal?: AbortSignal;
  /** The job's expiry (pg-boss 10 delivers it as a numeric string). */
  expireInSeconds?: number | string;
  /** With `includeMetadata`: attempts so far beyond the first, and how many retries the job has. */
  retryCount?: number;
  retryLimit?: number;
}

/** The job the handler receives: the pg-boss job, with the one signal to watch. */
export type LockedJob<T = object> = BossJob<T> & {
  /**
   * Aborts the moment the work should stop, with the cause as its reason ({@link JobStopReason}),
   * the same on every pg-boss major: the key's lock was lost (`LockLostError`, the same as
   * `lock.signal`); the job expired (`PGFENCE_JOB_EXPIRED`: pg-boss 12 times the batch itself and
   * aborts, pg-boss 10 and 11 abort nothing, so pgfence times `expireInSeconds` from delivery);
   * the boss stopped (`PGFENCE_BOSS_STOPPED`: pg-boss 12 aborts the worker after a graceful stop
   * gave up waiting, pg-boss 10 and 11 emit 'stopped' then); or pg-boss 12 aborted the job for
   * another reason, such as a lost claim (`PGFENCE_JOB_ABORTED`). pg-boss's own reason, if any, is
   * the `cause`.
   */
  readonly signal: AbortSignal;
};

/** Why a job's signal aborted: see the `signal` of {@link LockedJob}. */
export type JobStopReason = LockLostError | JobStoppedError;

/** pg-boss stopped a job (expiry, stop, or an abort of its own): the reason of a job's signal. */
export class JobStoppedError extends PgfenceError {
  declare readonly code: 'PGFENCE_JOB_EXPIRED' | 'PGFENCE_BOSS_STOPPED' | 'PGFENCE_JOB_ABORTED';
  /** null when the boss stopped (one reason shared by its running jobs). */
  readonly jobId: string | null;
  constructor(code: JobStoppedError['code'], jobId: string | null, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
    this.jobId = jobId;
  }
}

/** pg-boss `work()` options, passed through (`batchSize`, `pollingIntervalSeconds`, `includeMetadata`, ...). */
export interface BossWorkOptions {
  batchSize?: number;
  pollingIntervalSeconds?: number;
  includeMetadata?: boolean;
  priority?: boolean;
  [option: string]: unknown;
}

/**
 * What workWithLock needs of a PgBoss instance.
 *
 * @example
 * ```ts fragment
 * const bossLike: BossLike = boss; // a PgBoss of pg-boss 10, 11 or 12
 * ```
 */
export interface BossLike {
  work(name: string, options: BossWorkOptions, handler: (jobs: any[]) => Promise<unknown>): Promise<string>;
  fail(name: string, id: string, data: object): Promise<unknown>;
  once?(event: 'stopped', listener: () => void): unknown;
}

export interface WorkWithLockOptions<T = object> {
  /** The lock name of a job (hashed with the locker's namespace). Jobs with one key never overlap. */
  key: (job: BossJob<T>) => string;
  /**
   * How long a job waits for its key before it goes back to pg-boss (KeyBusyError). 0 = one try;
   * Infinity = until the job expires. Default: the locker's defaultTimeoutMs (10 s unless set).
   */
  waitMs?: number;
  /** Take the lock with a fencing token (`lock.token`); needs pgfence's schema (migrate()). */
  fencing?: boolean;
  /** Passed to `boss.work()`. */
  workOptions?: BossWorkOptions;
}
const WORK_WITH_LOCK_OPTION_KEYS = optionKeys<WorkWithLockOptions>({ key: true, waitMs: true, fencing: true, workOptions: true });

/** A job's key stayed busy past waitMs: the job goes back to pg-boss to be retried later. */
export class KeyBusyError extends PgfenceError {
  readonly lockName: string;
  readonly jobId: string;
  readonly waitMs: number | null;
  constructor(
    lockName: string,
    jobId: string,
    waitMs: number | null,
    options?: { cause?: unknown; retryCount?: unknown; retryLimit?: unknown },
  ) {
    super(
      'PGFENCE_KEY_BUSY',
      `job ${jobId}: lock "${lockName}" is busy (${waitMs === null ? 'an earlier job of the batch with this key found it held' : `waited ${waitMs} ms`}); ` +
        afterBounce(options?.retryCount, options?.retryLimit),
      options?.cause === undefined ? undefined : { cause: options.cause },
    );
    this.lockName = lockName;
    this.jobId = jobId;
    this.waitMs = waitMs;
  }
}

/** What pg-boss does with a bounced job: the job's retry counts say it when they came with it (includeMetadata). */
function afterBounce(retryCount: unknown, retryLimit: unknown): string {
  const advice = 'give the queue a larger retryLimit and a retryDelay, or a longer waitMs';
  if (typeof retryCount === 'number' && typeof retryLimit === 'number') {
    if (retryCount >= retryLimit) {
      return `failed for good: it had no retry left (${retryCount} of ${retryLimit} used); ${advice}`;
    }
    return `failed; pg-boss retries it after retryDelay (retry ${retryCount + 1} of ${retryLimit})`;
  }
  return `failed; pg-boss retries it after retryDelay if the job has a retry left (each bounce uses one: ${advice}), else it stays failed`;
}

/**
 * Registers a pg-boss worker (`boss.work(queue, workOptions, ...)`) that runs each job while holding
 * the locker's session advisory lock named `key(job)`: jobs that share a key never run at the same
 * time, across workers, bosses and processes; jobs with different keys run as concurrently as pg-boss
 * delivers them. Resolves with pg-boss's worker id.
 *
 * - The handler gets the job, with `job.signal` aborting when the lock is lost, the job expires or
 *   the boss stops (see {@link LockedJob}), and the lock handle (`lock.token` with `fencing: true`).
 *   What it returns becomes the job's output; a throw fails the job, which pg-boss retries per its
 *   retryLimit / retryDelay. A handler that resolves after its lock was lost fails the job with the
 *   `LockLostError`: it did not hold its key throughout.
 * - A job whose key stays busy past `waitMs` is failed with a {@link KeyBusyError}, so pg-boss
 *   retries it after retryDelay. pg-boss (10, 11, 12) has no public way to put an active job back
 *   without spending a retry: each busy bounce costs one, and a job out of retries ends `failed` (or
 *   dead-lettered) with that error as output. Hence the default wait (the locker's): same-key jobs
 *   mostly wait their turn in PostgreSQL's queue, woken at the release, and do not bounce.
 * - The lock is released when the handler settles, whatever the outcome.
 * - Batches (`batchSize` > 1): each job takes its own lock. Jobs of one batch that share a key run one
 *   after another in the batch's order (they never bounce off each other; pg-boss does not promise
 *   that order is creation order); other keys run concurrently.
 *   Once a job of a key bounces, the batch's later jobs of that key bounce too (no overtaking).
 *   A failed job of a batch is failed on its own (`boss.fail`); pg-boss completes the others.
 * - Errors and outputs reach pg-boss as JSON: bigint fields (pgfence errors, tokens) become strings.
 *
 * Arguments are validated before any I/O (InvalidArgumentError).
 *
 * @example
 * ```ts fragment
 * await workWithLock<{ orderId: number }>(boss, locker, 'orders', { key: (job) => `order:${job.data.orderId}`, fencing: true },
 *   (job, lock) => fencedUpdate(pool, { table: 'orders', set: { status: 'paid' }, where: { id: job.data.orderId }, token: lock.token }));
 * ```
 */
export async function workWithLock<T = object>(
  boss: BossLike,
  locker: Locker,
  queue: string,
  options: WorkWithLockOptions<T> & { fencing: true },
  handler: (job: LockedJob<T>, lock: FencedLockHandle) => Promise<unknown>,
): Promise<string>;
export async function workWithLock<T = object>(
  boss: BossLike,
  locker: Locker,
  queue: string,
  options: WorkWithLockOptions<T>,
  handler: (job: LockedJob<T>, lock: LockHandle) => Promise<unknown>,
): Promise<string>;
// handler takes a FencedLockHandle only under the fencing overload, where the token is there.
export async function workWithLock<T = object>(
  boss: BossLike,
  locker: Locker,
  queue: string,
  options: WorkWithLockOptions<T>,
  handler: (job: LockedJob<T>, lock: FencedLockHandle) => Promise<unknown>,
): Promise<string> {
  const o = checkArguments(boss, locker, queue, options, handler);
  const { key, waitMs, fencing } = o;
  const stopped = stopSignal(boss);
  const reporter = (locker as Partial<BounceReporter>)[reportBounce];
  /** Every bounce is reported through the locker: a warn log line, a 'bounce' event, the pgfence.pgboss.bounced counter. */
  const bounced = (job: BossJob<T>, error: KeyBusyError): KeyBusyError => {
    reporter?.call(locker, error.lockName, queue, job.id, error.waitMs);
    return error;
  };

  async function runJob(job: BossJob<T>, name: string, busy: { bounced: boolean }, batch: BatchClock): Promise<Outcome> {
    const retries = { retryCount: job.retryCount, retryLimit: job.retryLimit };
    if (busy.bounced) return { ok: false, error: jsonError(bounced(job, new KeyBusyError(name, job.id, null, retries))) };
    const expiry = job.signal ? null : expiryTimer(job);
    const external = anySignal(job.signal && bossJobSignal(job, job.signal, batch), expiry?.signal, stopped);
    let acquired = false;
    try {
      const value = await locker.withLock(
        name,
        async (lock) => {
          acquired = true;
          const locked = { ...job, signal: anySignal(external, lock.signal) } as LockedJob<T>;
          // Locks the handler takes are nested in the job's: a NestedLockError then names the handler and the fix.
          // A lock lost before the handler settled fails the job: withLock rejects then, with LockLostError.
          return runHolding(locker, lock, () => handler(locked, lock as FencedLockHandle), 'a workWithLock handler');
        },
        // Not nested in any caller's lock: a job is a context of its own, whoever registered the worker.
        { timeoutMs: waitMs, signal: external, fencing, allowNested: true },
      );
      return { ok: true, value: jsonCompatible(value) };
    } catch (err) {
      let error = err;
      if (!acquired && (err as PgfenceError | null)?.code === 'PGFENCE_LOCK_TIMEOUT') {
        error = bounced(job, new KeyBusyError(name, job.id, (err as { timeoutMs: number }).timeoutMs, { cause: err, ...retries }));
      }
      if ((error as PgfenceError | null)?.code === 'PGFENCE_KEY_BUSY') busy.bounced = true;
      return { ok: false, error: jsonError(error) };
    } finally {
      expiry?.clear();
    }
  }

  return boss.work(queue, o.workOptions, async (jobs: BossJob<T>[]) => {
    const batch = batchClock(jobs);
    const outcomes = new Map<BossJob<T>, Outcome>();
    // Jobs of one key, in delivery order, run one after another; keys run concurrently.
    const lines = new Map<string, { job: BossJob<T>; name: string }[]>();
    for (const job of jobs) {
      try {
        const name = key(job);
        lines.set(String(name), [...(lines.get(String(name)) ?? []), { job, name }]);
      } catch (err) {
        outcomes.set(job, { ok: false, error: jsonError(err) });
      }
    }
    await Promise.all(
      [...lines.values()].map(async (line) => {
        const busy = { bounced: false };
        for (const { job, name } of line) outcomes.set(job, await runJob(job, name, busy, batch));
      }),
    );

    if (jobs.length === 1) {
      // pg-boss's own settlement: the output or error is stored with the job.
      const outcome = outcomes.get(jobs[0]!)!;
      if (outcome.ok) return outcome.value;
      throw outcome.error;
    }
    // pg-boss settles a batch as a whole: fail the failed jobs one by one, and let it complete the rest.
    const unrecorded: unknown[] = [];
    await Promise.all(
      jobs.map(async (job) => {
        const outcome = outcomes.get(job)!;
        if (outcome.ok) return;
        try {
          await boss.fail(queue, job.id, outcome.error as object);
        } catch (err) {
          unrecorded.push(err);
        }
      }),
    );
    if (unrecorded.length > 0) {
      // Completing the batch now would mark a failed job completed: fail what is left instead.
      throw jsonError(
        new PgfenceError('PGFENCE_BATCH_UNSETTLED', `could not record ${unrecorded.length} failed job(s) of a batch; failing the rest of the batch`, {
          cause: unrecorded[0],
        }),
      );
    }
    return undefined;
  });
}

type Outcome = { ok: true; value: unknown } | { ok: false; error: unknown };

interface CheckedOptions<T> {
  key: (job: BossJob<T>) => string;
  waitMs: number | undefined;
  fencing: boolean;
  workOptions: BossWorkOptions;
}

function checkArguments<T>(boss: unknown, locker: unknown, queue: unknown, options: unknown, handler: unknown): CheckedOptions<T> {
  const b = boss as Partial<BossLike> | null;
  if (typeof b !== 'object' || b === null || typeof b.work !== 'function' || typeof b.fail !== 'function') {
    throw new InvalidArgumentError('boss', `expected a PgBoss instance, got ${describeType(boss)}`);
  }
  const l = locker as Partial<Locker> | null;
  if (typeof l !== 'object' || l === null || typeof l.withLock !== 'function') {
    throw new InvalidArgumentError('locker', `expected a locker from createLocker(), got ${describeType(locker)}`);
  }
  if (typeof queue !== 'string' || queue === '') {
    throw new InvalidArgumentError('queue', `expected a queue name, got ${describeType(queue)}`);
  }
  if (options === undefined) throw new InvalidArgumentError('options', 'expected { key: (job) => lock name, ... }, got undefined');
  const o = optionsObject<WorkWithLockOptions<T>>(options, 'options', WORK_WITH_LOCK_OPTION_KEYS as OptionKeysOf<T>);
  callback(o.key, 'key');
  callback(handler, 'handler');
  const waitMs = o.waitMs === undefined ? undefined : durationMs(o.waitMs, 'waitMs', { allowInfinity: true });
  const fencing = booleanOption(o.fencing, 'fencing', false);
  const workOptions = objectOption(o.workOptions, 'workOptions') as BossWorkOptions;
  for (const mode of ['perJobResults', 'transactional']) {
    if (workOptions[mode]) {
      throw new InvalidArgumentError(`workOptions.${mode}`, 'workWithLock settles the jobs itself and does not support this pg-boss handler mode');
    }
  }
  return { key: o.key!, waitMs, fencing, workOptions };
}

type OptionKeysOf<T> = readonly (keyof WorkWithLockOptions<T> & string)[];

/** When pg-boss handed over a batch, and when it fails the batch as expired (pg-boss 12 times the batch's longest expireInSeconds). */
interface BatchClock {
  receivedAt: number;
  expireMs: number;
}

function batchClock(jobs: BossJob<unknown>[]): BatchClock {
  const seconds = jobs.map((j) => Number(j.expireInSeconds)).filter((n) => Number.isFinite(n) && n > 0);
  return { receivedAt: performance.now(), expireMs: seconds.length > 0 ? Math.max(1, ...seconds) * 1000 : Infinity };
}

/** pg-boss starts its batch timer just after calling the handler, so our clock reads at least expireMs at its abort; this absorbs timer rounding. */
const EXPIRY_SLACK_MS = 50;

/**
 * pg-boss 12 aborts a job's signal with a bare AbortError both when the batch expires and when the
 * boss stops (a lost claim gets an Error of its own): name the cause, and keep pg-boss's reason as
 * the cause.
 */
function bossJobSignal(job: BossJob<unknown>, signal: AbortSignal, batch: BatchClock): AbortSignal {
  const controller = new AbortController();
  const translate = () => {
    const cause: unknown = signal.reason;
    if (performance.now() - batch.receivedAt >= batch.expireMs - EXPIRY_SLACK_MS) {
      controller.abort(new JobStoppedError('PGFENCE_JOB_EXPIRED', job.id, `job ${job.id} ran past its expireInSeconds (${batch.expireMs / 1000} s); pg-boss fails it`, { cause }));
    } else if ((cause as Error | null)?.name === 'AbortError') {
      controller.abort(new JobStoppedError('PGFENCE_BOSS_STOPPED', job.id, `pg-boss stopped the worker (stop() or offWork()) while job ${job.id} was running`, { cause }));
    } else {
      controller.abort(new JobStoppedError('PGFENCE_JOB_ABORTED', job.id, `pg-boss aborted job ${job.id}: ${(cause as Error | null)?.message ?? String(cause)}`, { cause }));
    }
  };
  if (signal.aborted) translate();
  else signal.addEventListener('abort', translate, { once: true });
  return controller.signal;
}

/** pg-boss 10 and 11 give a job no signal: time its expiry here, from when the worker got it. */
function expiryTimer(job: BossJob<unknown>): { signal: AbortSignal; clear(): void } | null {
  const seconds = Number(job.expireInSeconds);
  if (!Number.isFinite(seconds) || seconds <= 0) return null;
  const controller = new AbortController();
  const clear = setLongTimeout(
    () => controller.abort(new JobStoppedError('PGFENCE_JOB_EXPIRED', job.id, `job ${job.id} ran past its expireInSeconds (${seconds} s); pg-boss fails it`)),
    seconds * 1000,
    true,
  );
  return { signal: controller.signal, clear };
}

/** One 'stopped' listener per boss (and per start), shared by its workers. */
const stopSignals = new WeakMap<object, AbortSignal>();
function stopSignal(boss: BossLike): AbortSignal | undefined {
  if (typeof boss.once !== 'function') return undefined;
  const current = stopSignals.get(boss);
  if (current && !current.aborted) return current;
  const controller = new AbortController();
  boss.once('stopped', () => controller.abort(new JobStoppedError('PGFENCE_BOSS_STOPPED', null, 'pg-boss stopped while the job was running')));
  stopSignals.set(boss, controller.signal);
  return controller.signal;
}

/**
 * An error pg-boss can serialise: pgfence errors carry bigint keys and tokens, and pg-boss 10 fails a
 * job with an unawaited statement whose rejection (on a bigint) would crash the process.
 */
function jsonError(err: unknown, depth = 0): unknown {
  if (!(err instanceof Error) || depth > 4) return jsonCompatible(err);
  let changed = false;
  const fields: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(err)) {
    fields[k] = jsonCompatible(v);
    if (fields[k] !== v) changed = true;
  }
  const hasCause = 'cause' in err;
  const cause = hasCause ? jsonError(err.cause, depth + 1) : undefined;
  if (hasCause && cause !== err.cause) changed = true;
  if (!changed) return err;
  const copy = new Error(err.message, hasCause ? { cause } : undefined);
  copy.name = err.name;
  copy.stack = err.stack;
  return Object.assign(copy, fields);
}
