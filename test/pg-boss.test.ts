import { AggregationTemporality, InMemoryMetricExporter, MeterProvider, PeriodicExportingMetricReader } from '@opentelemetry/sdk-metrics';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createLocker, InvalidArgumentError, lockKey, StaleTokenError, type BounceEvent, type Locker, type LockHandle } from '../src/index.js';
import { JobStoppedError, KeyBusyError, workWithLock, type BossLike, type LockedJob } from '../src/pg-boss/index.js';
import { appName, eventually, killBackends, sleep, useMigratedDatabase } from './support/db.js';
import { installedAtLeast, pgBossClass, type TestBoss } from './support/versions.js';

const PgBoss = await pgBossClass();

let db: Awaited<ReturnType<typeof useMigratedDatabase>>;
const bosses: TestBoss[] = [];
const lockers: Locker[] = [];
const bossErrors: unknown[] = [];

beforeAll(async () => {
  db = await useMigratedDatabase('pg_boss');
});
/** Stops the bosses and closes the lockers of a test (the server's connections are shared by the files). */
async function cleanUp(): Promise<void> {
  await Promise.all(bosses.splice(0).map((b) => b.stop({ graceful: false })));
  await Promise.all(lockers.splice(0).map((l) => l.close()));
}
afterEach(cleanUp);
afterAll(async () => {
  await cleanUp();
  expect(bossErrors).toEqual([]);
});

/** A started boss on the file's database; pg-boss creates its own schema on the first start. */
async function startBoss(): Promise<TestBoss> {
  const boss = new PgBoss({ connectionString: db.url, max: 3, supervise: false, schedule: false });
  boss.on('error', (err) => bossErrors.push(err));
  await boss.start(); // one at a time: the first one installs pg-boss's schema
  bosses.push(boss);
  return boss;
}

function openLocker(url = db.url): Locker {
  const l = createLocker({ connectionString: url });
  lockers.push(l);
  return l;
}

const fast = { pollingIntervalSeconds: 0.5 };

type Job = { key: string; i: number; fail?: boolean };
type Run = { id: string; key: string; i: number; start: number; end: number; token: bigint | null; worker: string };

/** A handler that records when each job held its key, holding it for `ms`. */
function recorder(runs: Run[], worker: string, ms: number) {
  return async (job: LockedJob<Job>, lock: LockHandle) => {
    const start = performance.now();
    await sleep(ms);
    if (job.data.fail) throw new Error(`job ${job.data.i} fails`);
    runs.push({ id: job.id, key: job.data.key, i: job.data.i, start, end: performance.now(), token: lock.token, worker });
    return { i: job.data.i, token: lock.token };
  };
}

function byKey(runs: Run[]): Map<string, Run[]> {
  const map = new Map<string, Run[]>();
  for (const r of runs) map.set(r.key, [...(map.get(r.key) ?? []), r]);
  return map;
}

function assertNoOverlapPerKey(runs: Run[]): void {
  for (const [key, list] of byKey(runs)) {
    const sorted = [...list].sort((a, b) => a.start - b.start);
    for (let i = 1; i < sorted.length; i++) {
      expect(sorted[i]!.start, `key ${key}: run ${i} started before run ${i - 1} ended`).toBeGreaterThanOrEqual(sorted[i - 1]!.end);
    }
  }
}

function overlapsAcrossKeys(runs: Run[]): boolean {
  return runs.some((a) => runs.some((b) => a.key !== b.key && a.start < b.end && b.start < a.end));
}

async function jobOf(boss: TestBoss, queue: string, id: string) {
  const job = await boss.getJobById<Job>(queue, id);
  if (!job) throw new Error(`job ${id} not found`);
  return job as typeof job & { output: Record<string, unknown> | null };
}

async function sendAll(boss: TestBoss, queue: string, jobs: Job[], options: { expireInSeconds?: number } = {}): Promise<string[]> {
  const ids: string[] = [];
  for (const data of jobs) ids.push((await boss.send(queue, data, options))!);
  return ids;
}

async function lockIsFree(locker: Locker, name: string): Promise<boolean> {
  const h = await locker.tryAcquire(name);
  if (!h) return false;
  await h.release();
  return true;
}

describe('workWithLock', () => {
  it('never runs two jobs of one key at once, across two bosses and lockers, while keys run concurrently', async () => {
    const queue = 'serial';
    const [a, b] = [await startBoss(), await startBoss()];
    await a.createQueue(queue);
    const keys = ['serial:0', 'serial:1', 'serial:2', 'serial:3'];
    const ids = await sendAll(a, queue, Array.from({ length: 24 }, (_, i) => ({ key: keys[i % keys.length]!, i })));

    const runs: Run[] = [];
    const opts = { key: (job: { data: Job }) => job.data.key, workOptions: { ...fast, batchSize: 3 } };
    for (const [boss, locker, name] of [[a, openLocker(), 'a'], [b, openLocker(), 'b']] as const) {
      // Two workers per boss on one locker: four polling loops in all.
      await workWithLock<Job>(boss, locker, queue, opts, recorder(runs, `${name}1`, 40));
      await workWithLock<Job>(boss, locker, queue, opts, recorder(runs, `${name}2`, 40));
    }
    await eventually(() => runs.length === 24, 30_000, 'all 24 jobs to run');

    expect(new Set(runs.map((r) => r.id)).size).toBe(24);
    assertNoOverlapPerKey(runs);
    expect(overlapsAcrossKeys(runs)).toBe(true);
    expect(new Set(runs.map((r) => r.worker[0])).size).toBe(2); // both bosses took part
    await eventually(async () => (await Promise.all(ids.map((id) => jobOf(a, queue, id)))).every((j) => j.state === 'completed'), 10_000, 'completions');
    for (const id of ids) expect((await jobOf(a, queue, id)).retryCount).toBe(0); // waited for the key, never bounced
  });

  it('puts a job whose key stays busy back into pg-boss, which retries it until the key is free', async () => {
    const queue = 'busy';
    const boss = await startBoss();
    await boss.createQueue(queue, { retryLimit: 10, retryDelay: 1 });
    const holder = openLocker();
    const held = await holder.acquire('busy:1');

    const runs: Run[] = [];
    await workWithLock<Job>(boss, openLocker(), queue, { key: (job) => job.data.key, waitMs: 100, workOptions: fast }, recorder(runs, 'w', 0));
    const [id] = await sendAll(boss, queue, [{ key: 'busy:1', i: 0 }]);

    // Bounced with a recognisable error, waiting for its retry: not a crash, not a permanent failure.
    await eventually(async () => (await jobOf(boss, queue, id!)).retryCount >= 1, 15_000, 'a second attempt');
    const bounced = await jobOf(boss, queue, id!);
    expect(['retry', 'active']).toContain(bounced.state);
    expect(bounced.output).toMatchObject({ name: 'KeyBusyError', code: 'PGFENCE_KEY_BUSY', lockName: 'busy:1', jobId: id, waitMs: 100 });
    expect(runs).toEqual([]);

    await held.release();
    await eventually(async () => (await jobOf(boss, queue, id!)).state === 'completed', 15_000, 'completion once the key is free');
    expect(runs.map((r) => r.id)).toEqual([id]);
    // The limitation, made visible: every bounce spent one of the job's retries.
    const done = await jobOf(boss, queue, id!);
    expect(done.retryCount).toBeGreaterThanOrEqual(1);
    expect(done.retryCount).toBeLessThan(10);
  });

  it('releases the lock when the handler throws, and pg-boss retries then fails the job (bigint fields and all)', async () => {
    const queue = 'errors';
    const boss = await startBoss();
    await boss.createQueue(queue, { retryLimit: 1, retryDelay: 0 });
    const locker = openLocker();
    let calls = 0;
    await workWithLock<Job>(boss, locker, queue, { key: (job) => job.data.key, workOptions: fast }, async () => {
      calls++;
      // A pgfence error carries bigints, which pg-boss 10 cannot store as they are.
      throw new StaleTokenError(5n, 7n);
    });
    const [id] = await sendAll(boss, queue, [{ key: 'errors:1', i: 0 }]);

    await eventually(async () => (await jobOf(boss, queue, id!)).state === 'failed', 15_000, 'the job to fail for good');
    const failed = await jobOf(boss, queue, id!);
    expect(calls).toBe(2); // the first run and its one retry
    expect(failed.retryCount).toBe(1);
    expect(failed.output).toMatchObject({ name: 'StaleTokenError', code: 'PGFENCE_STALE_TOKEN', token: '5', currentToken: '7' });
    expect(locker.stats().held).toBe(0);
    expect(await lockIsFree(openLocker(), 'errors:1')).toBe(true);
  });

  it('passes fencing tokens that increase per key, and stores them in the output as strings', async () => {
    const queue = 'fenced';
    const boss = await startBoss();
    await boss.createQueue(queue);
    const ids = await sendAll(boss, queue, Array.from({ length: 10 }, (_, i) => ({ key: `fenced:${i % 2}`, i })));
    const runs: Run[] = [];
    const locker = openLocker();
    const opts = { key: (job: { data: Job }) => job.data.key, fencing: true, workOptions: { ...fast, batchSize: 2 } };
    await workWithLock<Job>(boss, locker, queue, opts, recorder(runs, 'w1', 10));
    await workWithLock<Job>(boss, locker, queue, opts, recorder(runs, 'w2', 10));
    await eventually(() => runs.length === 10, 20_000, 'all 10 jobs to run');

    assertNoOverlapPerKey(runs);
    for (const list of byKey(runs).values()) {
      const tokens = [...list].sort((x, y) => x.start - y.start).map((r) => r.token);
      expect(tokens.every((t) => typeof t === 'bigint')).toBe(true);
      for (let i = 1; i < tokens.length; i++) expect(tokens[i]! > tokens[i - 1]!).toBe(true);
    }
    // A batch of one is settled by pg-boss with the handler's value; a batch of two stores no output.
    await eventually(async () => (await Promise.all(ids.map((id) => jobOf(boss, queue, id)))).every((j) => j.state === 'completed'), 10_000, 'completions');
    for (const run of runs) {
      const { output } = await jobOf(boss, queue, run.id);
      if (output) expect(output).toEqual({ i: run.i, token: String(run.token) });
    }
  });

  it('runs the jobs of one batch that share a key one after another, and settles each job of a batch on its own', async () => {
    const queue = 'batch';
    const boss = await startBoss();
    await boss.createQueue(queue, { retryLimit: 0 });
    const jobs: Job[] = [
      { key: 'batch:same', i: 0 },
      { key: 'batch:same', i: 1 },
      { key: 'batch:x', i: 2, fail: true },
      { key: 'batch:same', i: 3 },
      { key: 'batch:y', i: 4 },
      { key: 'batch:same', i: 5 },
    ];
    const ids = await sendAll(boss, queue, jobs);
    const runs: Run[] = [];
    // One try per job (waitMs 0): the same-key jobs of the batch still never bounce off each other.
    await workWithLock<Job>(boss, openLocker(), queue, { key: (job) => job.data.key, waitMs: 0, workOptions: { ...fast, batchSize: 6 } }, recorder(runs, 'w', 30));

    await eventually(async () => (await Promise.all(ids.map((id) => jobOf(boss, queue, id)))).every((j) => j.state === 'completed' || j.state === 'failed'), 15_000, 'the batch to settle');
    const states = await Promise.all(ids.map(async (id) => (await jobOf(boss, queue, id)).state));
    expect(states).toEqual(['completed', 'completed', 'failed', 'completed', 'completed', 'completed']);
    expect((await jobOf(boss, queue, ids[2]!)).output).toMatchObject({ message: 'job 2 fails' });
    assertNoOverlapPerKey(runs);
    expect(runs.filter((r) => r.key === 'batch:same')).toHaveLength(4);
    expect(overlapsAcrossKeys(runs)).toBe(true);
    // One batch, one try each: no job bounced off its batch mates.
    for (const id of ids) expect((await jobOf(boss, queue, id)).retryCount).toBe(0);
  });

  it('bounces the later same-key jobs of a batch at once when the first one found the key busy', async () => {
    const queue = 'bounce';
    const boss = await startBoss();
    await boss.createQueue(queue, { retryLimit: 10, retryDelay: 1 });
    const held = await openLocker().acquire('bounce:1');
    const ids = await sendAll(boss, queue, [0, 1, 2].map((i) => ({ key: 'bounce:1', i })));
    const runs: Run[] = [];
    await workWithLock<Job>(boss, openLocker(), queue, { key: (job) => job.data.key, waitMs: 50, workOptions: { ...fast, batchSize: 3 } }, recorder(runs, 'w', 0));

    await eventually(async () => (await Promise.all(ids.map((id) => jobOf(boss, queue, id)))).every((j) => j.output?.code === 'PGFENCE_KEY_BUSY'), 15_000, 'all three to bounce');
    const waits = (await Promise.all(ids.map((id) => jobOf(boss, queue, id)))).map((j) => j.output!.waitMs);
    expect(waits.sort()).toEqual([50, null, null]); // one waited; the others did not queue up behind it
    await held.release();
    await eventually(async () => (await Promise.all(ids.map((id) => jobOf(boss, queue, id)))).every((j) => j.state === 'completed'), 15_000, 'completions');
    expect(runs).toHaveLength(3);
    assertNoOverlapPerKey(runs);
  });

  it('reports every bounce like a timeout: a warn log line, a bounce event and the pgfence.pgboss.bounced counter', async () => {
    const queue = 'reported';
    const boss = await startBoss();
    await boss.createQueue(queue, { retryLimit: 0 }); // each job bounces exactly once
    const held = await openLocker().acquire('reported:1');
    const warnings: { obj: Record<string, unknown>; msg?: string }[] = [];
    const logger = { debug: () => {}, info: () => {}, warn: (obj: object, msg?: string) => warnings.push({ obj: obj as Record<string, unknown>, msg }), error: () => {} };
    const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
    const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 });
    const provider = new MeterProvider({ readers: [reader] });
    const locker = createLocker({ connectionString: db.url, logger, meter: provider.getMeter('pgfence-test') });
    lockers.push(locker);
    const events: BounceEvent[] = [];
    locker.on('bounce', (ev: BounceEvent) => events.push(ev));
    // One try (waitMs 0) and two bounces behind it in the batch: none of them waits, all are reported.
    const ids = await sendAll(boss, queue, [0, 1, 2].map((i) => ({ key: 'reported:1', i })));
    await workWithLock<Job>(boss, locker, queue, { key: (job) => job.data.key, waitMs: 0, workOptions: { ...fast, batchSize: 3 } }, recorder([], 'w', 0));
    await eventually(async () => (await Promise.all(ids.map((id) => jobOf(boss, queue, id)))).every((j) => j.state === 'failed'), 15_000, 'three bounced jobs');

    expect(events.map((e) => e.jobId).sort()).toEqual([...ids].sort());
    for (const e of events) expect(e).toMatchObject({ kind: 'lock', name: 'reported:1', key: lockKey('reported:1'), mode: 'exclusive', queue });
    expect(events.map((e) => e.waitMs).sort()).toEqual([0, null, null]);
    const lines = warnings.filter((w) => w.msg === 'pgfence: job returned to pg-boss for a retry: its key is busy');
    expect(lines.map((w) => w.obj.jobId).sort()).toEqual([...ids].sort());
    expect(lines[0]!.obj).toMatchObject({ lock: 'reported:1', key: String(lockKey('reported:1')), queue });
    await reader.forceFlush();
    const points = exporter
      .getMetrics()
      .flatMap((rm) => rm.scopeMetrics.flatMap((sm) => sm.metrics))
      .filter((m) => m.descriptor.name === 'pgfence.pgboss.bounced')
      .flatMap((m) => m.dataPoints as { value: number }[]);
    expect(points.reduce((n, p) => n + p.value, 0)).toBe(3);
    await held.release();
    await provider.shutdown();
  });

  it('aborts job.signal with the LockLostError when the lock is lost, and fails a job that ignores it', async () => {
    const queue = 'lost';
    const boss = await startBoss();
    await boss.createQueue(queue, { retryLimit: 0 });
    const app = appName('pgboss_lost');
    let started = false;
    let reason: unknown;
    await workWithLock<Job>(boss, openLocker(db.urlWith({ application_name: app })), queue, { key: (job) => job.data.key, workOptions: fast }, async (job) => {
      started = true;
      await new Promise((resolve) => job.signal.addEventListener('abort', resolve, { once: true }));
      reason = job.signal.reason;
      return 'carried on regardless';
    });
    const [id] = await sendAll(boss, queue, [{ key: 'lost:1', i: 0 }]);
    await eventually(() => started, 15_000, 'the handler to start');
    expect(await killBackends(db.url, app)).toBeGreaterThan(0);

    await eventually(async () => (await jobOf(boss, queue, id!)).state === 'failed', 15_000, 'the job to fail');
    expect((reason as { code?: string }).code).toBe('PGFENCE_LOCK_LOST');
    expect((await jobOf(boss, queue, id!)).output).toMatchObject({ code: 'PGFENCE_LOCK_LOST', lockName: 'lost:1' });
    expect(await lockIsFree(openLocker(), 'lost:1')).toBe(true);
  });

  it('aborts job.signal with the same reasons on every pg-boss major when the job expires and when the boss stops, releasing the lock', async () => {
    // pg-boss 12 aborts job.signal itself, with a bare AbortError (kept as the cause); 10 and 11 have no signal.
    const bossAborts = installedAtLeast('pg-boss', 12);
    const queue = 'expire';
    const boss = await startBoss();
    await boss.createQueue(queue, { retryLimit: 0, expireInSeconds: 1 });
    const locker = openLocker();
    const reasons: unknown[] = [];
    await workWithLock<Job>(boss, locker, queue, { key: (job) => job.data.key, workOptions: fast }, async (job) => {
      await new Promise((resolve) => job.signal.addEventListener('abort', resolve, { once: true }));
      reasons.push(job.signal.reason);
      throw job.signal.reason;
    });
    const [expiring] = await sendAll(boss, queue, [{ key: 'expire:1', i: 0 }]);
    await eventually(() => reasons.length === 1, 15_000, 'the expiry to abort the handler');
    expect(reasons[0]).toBeInstanceOf(JobStoppedError);
    expect(reasons[0]).toMatchObject({ code: 'PGFENCE_JOB_EXPIRED', jobId: expiring });
    expect((reasons[0] as JobStoppedError).cause).toEqual(bossAborts ? expect.objectContaining({ name: 'AbortError' }) : undefined);
    await eventually(async () => (await jobOf(boss, queue, expiring!)).state === 'failed', 10_000, 'pg-boss to fail the expired job');
    await eventually(() => locker.stats().held === 0, 5000, 'the release');

    // A job still running when a graceful stop gives up waiting.
    await boss.send(queue, { key: 'expire:2', i: 1 }, { expireInSeconds: 60 });
    await eventually(() => locker.stats().held === 1, 15_000, 'the second job to start');
    await boss.stop({ timeout: 1000 });
    await eventually(() => reasons.length === 2, 10_000, 'the stop to abort the handler');
    expect(reasons[1]).toBeInstanceOf(JobStoppedError);
    expect((reasons[1] as JobStoppedError).code).toBe('PGFENCE_BOSS_STOPPED');
    expect((reasons[1] as JobStoppedError).cause).toEqual(bossAborts ? expect.objectContaining({ name: 'AbortError' }) : undefined);
    await eventually(() => locker.stats().held === 0, 5000, 'the release');
    expect(await lockIsFree(openLocker(), 'expire:2')).toBe(true);
  });

  it('rejects bad arguments before any I/O', async () => {
    const boss = await startBoss();
    let registered = 0;
    const counting: BossLike = {
      work: (...args) => (registered++, boss.work(...args)),
      fail: (...args) => boss.fail(...args),
    };
    const locker = openLocker();
    const ok = { key: (job: { id: string }) => job.id };
    const handler = async () => undefined;
    const bad: [string, () => Promise<unknown>][] = [
      ['boss', () => workWithLock(null as never, locker, 'q', ok, handler)],
      ['boss', () => workWithLock({ work: () => 'x' } as never, locker, 'q', ok, handler)],
      ['locker', () => workWithLock(counting, {} as never, 'q', ok, handler)],
      ['queue', () => workWithLock(counting, locker, '', ok, handler)],
      ['queue', () => workWithLock(counting, locker, 5 as never, ok, handler)],
      ['options', () => workWithLock(counting, locker, 'q', undefined as never, handler)],
      ['options', () => workWithLock(counting, locker, 'q', [] as never, handler)],
      ['key', () => workWithLock(counting, locker, 'q', {} as never, handler)],
      ['key', () => workWithLock(counting, locker, 'q', { key: 'id' } as never, handler)],
      ['waitMs', () => workWithLock(counting, locker, 'q', { ...ok, waitMs: -1 }, handler)],
      ['waitMs', () => workWithLock(counting, locker, 'q', { ...ok, waitMs: NaN }, handler)],
      ['waitMs', () => workWithLock(counting, locker, 'q', { ...ok, waitMs: '10' as never }, handler)],
      ['waitMs', () => workWithLock(counting, locker, 'q', { ...ok, waitMs: 1e15 }, handler)],
      ['fencing', () => workWithLock(counting, locker, 'q', { ...ok, fencing: 'yes' as never }, handler)],
      ['workOptions', () => workWithLock(counting, locker, 'q', { ...ok, workOptions: 3 as never }, handler)],
      ['workOptions.transactional', () => workWithLock(counting, locker, 'q', { ...ok, workOptions: { transactional: true } }, handler)],
      ['handler', () => workWithLock(counting, locker, 'q', ok, undefined as never)],
    ];
    for (const [argument, call] of bad) {
      const err = await call().then(
        () => null,
        (e: unknown) => e,
      );
      expect(err, argument).toBeInstanceOf(InvalidArgumentError);
      expect((err as InvalidArgumentError).argument).toBe(argument);
    }
    expect(registered).toBe(0);
    // And the good ones pass: Infinity waits until the job expires.
    await boss.createQueue('args');
    await expect(workWithLock(counting, locker, 'args', { ...ok, waitMs: Infinity }, handler)).resolves.toEqual(expect.any(String));
    expect(registered).toBe(1);
    expect(new KeyBusyError('k', 'id', 0).code).toBe('PGFENCE_KEY_BUSY');
  });
});

describe('workWithLock: errors that say what to do', () => {
  it('a lease taken inside a handler is a NestedLockError that names the handler and the fix; the fix works; a permit needs no fix', async () => {
    const queue = 'nested';
    const boss = await startBoss();
    await boss.createQueue(queue, { retryLimit: 0 });
    const locker = openLocker();
    const sem = locker.semaphore('nested:pool', { permits: 2 });
    let allowed = false;
    await workWithLock<Job>(boss, locker, queue, { key: (job) => job.data.key, workOptions: fast }, async () => {
      await sem.withPermit(async () => 'a permit is a leaf: granted inside the handler');
      return locker.withLease('nested:lease', async () => 'inside', { allowNested: allowed });
    });
    const [refused] = await sendAll(boss, queue, [{ key: 'nested:1', i: 0 }]);
    await eventually(async () => (await jobOf(boss, queue, refused!)).state === 'failed', 15_000, 'the job to fail');
    const { output } = await jobOf(boss, queue, refused!);
    expect(output).toMatchObject({ name: 'NestedLockError', code: 'PGFENCE_NESTED_LOCK' });
    // The permit was granted (a permit is a leaf); the lease is refused.
    expect(output!.message).toMatch(/^lease "nested:lease" .* was requested inside a workWithLock handler, which holds lock "nested:1"/);
    expect(output!.message).toMatch(/take the lease outside it, .* or pass \{ allowNested: true \} to the inner call/);

    allowed = true;
    const [ok] = await sendAll(boss, queue, [{ key: 'nested:1', i: 1 }]);
    await eventually(async () => (await jobOf(boss, queue, ok!)).state === 'completed', 15_000, 'the job to complete');
  });

  it('a busy key on a job with no retry left says the job failed for good, not that it went back for a retry', async () => {
    const queue = 'lastbounce';
    const boss = await startBoss();
    await boss.createQueue(queue, { retryLimit: 0 });
    const holder = openLocker();
    const held = await holder.acquire('lastbounce:1');
    await workWithLock<Job>(
      boss,
      openLocker(),
      queue,
      { key: (job) => job.data.key, waitMs: 50, workOptions: { ...fast, includeMetadata: true } },
      async () => 'ran',
    );
    const [id] = await sendAll(boss, queue, [{ key: 'lastbounce:1', i: 0 }]);
    await eventually(async () => (await jobOf(boss, queue, id!)).state === 'failed', 15_000, 'the job to fail');
    const { output } = await jobOf(boss, queue, id!);
    expect(output).toMatchObject({ code: 'PGFENCE_KEY_BUSY' });
    expect(output!.message).toMatch(/failed for good: it had no retry left \(0 of 0 used\)/);
    expect(output!.message).not.toMatch(/returned to pg-boss for a retry/);
    await held.release();
    // Without the job's retry counts (no includeMetadata) the message does not promise a retry either.
    expect(new KeyBusyError('k', 'id', 50).message).toMatch(/retries it after retryDelay if the job has a retry left/);
    expect(new KeyBusyError('k', 'id', 50, { retryCount: 1, retryLimit: 3 }).message).toMatch(/pg-boss retries it after retryDelay \(retry 2 of 3\)/);
  });
});
