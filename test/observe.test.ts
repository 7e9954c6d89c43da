import { execFile, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { createLocker, lockKey, LockLostError, LockTimeoutError, type LockEntry } from '../src/index.js';
import { appName, eventually, killBackends, track, useMigratedDatabase } from './support/db.js';
import { withTimeout } from './support/server.js';

let db: Awaited<ReturnType<typeof useMigratedDatabase>>;
const execFileAsync = promisify(execFile);
const root = fileURLToPath(new URL('..', import.meta.url));

beforeAll(async () => {
  db = await useMigratedDatabase('observe');
});

/** Paths to every bigint reachable through own enumerable properties (what JSON loggers walk). */
function bigintPaths(value: unknown, path = '$', seen = new Set<unknown>()): string[] {
  if (typeof value === 'bigint') return [path];
  if (value === null || typeof value !== 'object' || seen.has(value)) return [];
  seen.add(value);
  return Object.keys(value).flatMap((k) => bigintPaths((value as Record<string, unknown>)[k], `${path}.${k}`, seen));
}

describe('metrics', () => {
  it('records wait and hold histograms and the counters through an OpenTelemetry meter', async () => {
    const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
    const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 });
    const provider = new MeterProvider({ readers: [reader] });
    const app = appName('metrics');
    const locker = track(createLocker({ connectionString: db.urlWith({ application_name: app }), meter: provider.getMeter('pgfence-test') }));
    const other = track(createLocker({ connectionString: db.url }));

    const h = await locker.acquire('m:one');
    await h.release();
    const busy = await other.acquire('m:busy');
    await expect(locker.acquire('m:busy', { timeoutMs: 100 })).rejects.toBeInstanceOf(LockTimeoutError);
    await busy.release();
    const held = await locker.acquire('m:held');
    const doomed = await locker.acquire('m:lost');
    await killBackends(db.url, app);
    await eventually(() => doomed.signal.aborted && held.signal.aborted, 15_000, 'the loss of both held locks');

    await reader.forceFlush();
    const metrics = new Map<string, { dataPoints: { value: unknown; attributes: Record<string, unknown> }[] }>();
    for (const rm of exporter.getMetrics()) for (const sm of rm.scopeMetrics) for (const m of sm.metrics) metrics.set(m.descriptor.name, m as never);
    const sum = (name: string) =>
      (metrics.get(name)?.dataPoints ?? []).reduce((n, p) => n + (typeof p.value === 'number' ? p.value : (p.value as { count: number }).count), 0);
    expect(sum('pgfence.lock.acquired')).toBe(3);
    expect(sum('pgfence.lock.timeouts')).toBe(1);
    expect(sum('pgfence.lock.contention')).toBe(1);
    expect(sum('pgfence.lock.lost')).toBe(2); // both held locks were on the killed sessions
    expect(sum('pgfence.lock.wait')).toBe(4); // three grants and one timeout
    expect(sum('pgfence.lock.hold')).toBe(3); // one release and two losses
    expect(metrics.get('pgfence.lock.held')!.dataPoints[0]!.value).toBe(0);

    // Every instrument has a unit, and docs/api.md's table documents it with its unit and every attribute
    // (and attribute value) it was recorded with.
    const readme = readFileSync(new URL('../docs/api.md', import.meta.url), 'utf8');
    expect(metrics.size).toBe(7);
    for (const [name, m] of metrics) {
      const unit = (m as unknown as { descriptor: { unit: string } }).descriptor.unit;
      expect(unit, `${name} has a unit`).toMatch(/^(ms|\{[a-z]+\})$/);
      const row = readme.split('\n').map((l) => l.trim()).find((l) => l.startsWith(`| \`${name}\` |`));
      expect(row, `docs/api.md's metrics table has a row for ${name}`).toBeDefined();
      expect(row).toContain(`| \`${unit}\` |`);
      for (const p of m.dataPoints) {
        for (const [key, value] of Object.entries(p.attributes)) {
          expect(row, `${name}: attribute ${key}`).toContain(`\`${key}\``);
          if (key !== 'pgfence.kind' && key !== 'pgfence.mode') expect(row, `${name}: ${key}=${String(value)}`).toContain(`\`${String(value)}\``);
        }
      }
    }
    void held;
    await provider.shutdown();
  });
});

describe('logs', () => {
  it('logs every acquisition and release at debug with durations, timeouts and losses at warn', async () => {
    const entries: { level: string; msg?: string; obj: Record<string, unknown> }[] = [];
    const log = (level: string) => (obj: object, msg?: string) => entries.push({ level, msg, obj: obj as Record<string, unknown> });
    const logger = { level: 'debug', debug: log('debug'), info: log('info'), warn: log('warn'), error: log('error') };
    const app = appName('logs');
    const locker = track(createLocker({ connectionString: db.urlWith({ application_name: app }), logger }));
    const other = track(createLocker({ connectionString: db.url }));
    await (await locker.acquire('log:a')).release();
    const busy = await other.acquire('log:b');
    await expect(locker.acquire('log:b', { timeoutMs: 50 })).rejects.toBeInstanceOf(LockTimeoutError);
    await busy.release();
    const h = await locker.acquire('log:c');
    await killBackends(db.url, app);
    await eventually(() => h.signal.aborted, 15_000, 'the loss');

    const acquired = entries.find((e) => e.msg === 'pgfence: acquired' && e.obj.lock === 'log:a');
    const released = entries.find((e) => e.msg === 'pgfence: released' && e.obj.lock === 'log:a');
    expect(acquired).toMatchObject({ level: 'debug', obj: { key: expect.any(String), mode: 'exclusive', waitMs: expect.any(Number) } });
    expect(released).toMatchObject({ level: 'debug', obj: { holdMs: expect.any(Number) } });
    expect(entries.find((e) => e.msg === 'pgfence: timed out waiting for lock')).toMatchObject({ level: 'warn', obj: { lock: 'log:b' } });
    expect(entries.find((e) => e.msg === 'pgfence: lock lost')).toMatchObject({ level: 'warn', obj: { lock: 'log:c', reason: 'session-lost' } });
    // Keys are logged as strings: JSON loggers cannot serialise bigints.
    expect(() => JSON.stringify(entries.map((e) => e.obj))).not.toThrow();
    // ... at every depth, errors included: pino copies an error's own fields (not its toJSON) and
    // writes a bigint as a JSON number, which loses precision (err.key of a lost lock).
    expect(bigintPaths(entries.map((e) => e.obj))).toEqual([]);
    const lostErr = entries.find((e) => e.msg === 'pgfence: lock lost')!.obj.err as LockLostError;
    expect(lostErr).toBeInstanceOf(LockLostError); // still an error of its class (pino's err.type)
    expect(lostErr.key).toBe(String(h.key));
    expect(lostErr.stack).toContain('LockLostError');
    expect(h.signal.reason).toBeInstanceOf(LockLostError);
    expect(typeof (h.signal.reason as LockLostError).key).toBe('bigint'); // the thrown error is untouched
  });

  it("follows the logger's level: isLevelEnabled (asked at each line), else its level, else info and above", async () => {
    const entries: { level: string; msg?: string }[] = [];
    const log = (level: string) => (_obj: object, msg?: string) => void entries.push({ level, msg });
    const methods = { debug: log('debug'), info: log('info'), warn: log('warn'), error: log('error') };
    const cycle = async (logger: object, name: string) => {
      entries.length = 0;
      const locker = track(createLocker({ connectionString: db.url, logger: logger as never }));
      await (await locker.acquire(name)).release();
      return entries.filter((e) => e.msg === 'pgfence: acquired' || e.msg === 'pgfence: released').length;
    };
    expect(await cycle(methods, 'level:none')).toBe(0); // no level: info and above, as console
    expect(await cycle({ ...methods, level: 'info' }, 'level:info')).toBe(0);
    expect(await cycle({ ...methods, level: 'debug' }, 'level:debug')).toBe(2);
    expect(await cycle({ ...methods, level: 'trace' }, 'level:trace')).toBe(2);
    let current = 'warn';
    const pinoLike = { ...methods, level: 'debug', isLevelEnabled: (level: string) => level === 'debug' ? current === 'debug' : true };
    expect(await cycle(pinoLike, 'level:pino')).toBe(0); // isLevelEnabled wins over level
    current = 'debug';
    expect(await cycle(pinoLike, 'level:pino2')).toBe(2);
    // Warnings reach a logger without a level.
    entries.length = 0;
    const quiet = track(createLocker({ connectionString: db.url, logger: methods }));
    const other = track(createLocker({ connectionString: db.url }));
    const held = await other.acquire('level:warn');
    await expect(quiet.acquire('level:warn', { timeoutMs: 50 })).rejects.toBeInstanceOf(LockTimeoutError);
    await held.release();
    expect(entries).toEqual([{ level: 'warn', msg: 'pgfence: timed out waiting for lock' }]);
  });

  it('a plain console prints no line for an acquire and a release; { ...console, level: "debug" } does', async () => {
    const script = (logger: string) => `
      import { createLocker } from 'pgfence';
      const locker = createLocker({ connectionString: process.env.DATABASE_URL, logger: ${logger} });
      await (await locker.acquire('console:1')).release();
      await locker.close();
      console.log('done');`;
    const run = async (logger: string) =>
      (await execFileAsync(process.execPath, ['--input-type=module', '-e', script(logger)], { cwd: root, env: { ...process.env, DATABASE_URL: db.url }, timeout: 60_000 })).stdout;
    expect(await run('console')).toBe('done\n');
    expect(await run("{ ...console, level: 'debug' }")).toMatch(/pgfence: acquired[^]*pgfence: released[^]*done/);
  });
});

describe('inspect', () => {
  it('sees locks held by another process, waiters, names and leases', async () => {
    const child = spawn(process.execPath, [new URL('./fixtures/holder.mjs', import.meta.url).pathname, db.urlWith({ application_name: 'pgfence_holder_proc' }), 'inspect:held'], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    try {
      await once(child.stdout!, 'data');
      const locker = track(createLocker({ connectionString: db.url }));
      const lease = await locker.lease('inspect:lease', { ttlMs: 30_000, owner: 'inspector', data: { n: 1 } });
      const mine = await locker.acquire('inspect:mine', { mode: 'shared' });
      const waiting = locker.acquire('inspect:held', { timeoutMs: 30_000 }).catch((e: unknown) => e);

      let report = await locker.inspect();
      const find = (name: string, state: LockEntry['state']) => report.locks.find((l) => l.name === name && l.state === state);
      await eventually(async () => {
        report = await locker.inspect();
        return find('inspect:held', 'held') !== undefined && find('inspect:held', 'waiting') !== undefined;
      }, 15_000, 'the other process’s lock and our wait, with names');
      const held = find('inspect:held', 'held')!;
      expect(held).toMatchObject({ mode: 'exclusive', applicationName: 'pgfence_holder_proc', mine: false, pid: expect.any(Number) });
      expect(held.since).toBeInstanceOf(Date);
      const wait = find('inspect:held', 'waiting')!;
      expect(wait.waitKind).toBe('blocked');
      expect(wait.sinceIs).toBe('waiting');
      expect(find('inspect:mine', 'held')).toMatchObject({ mode: 'shared', mine: true, sinceIs: 'granted' });
      const l = report.leases.find((x) => x.name === 'inspect:lease')!;
      expect(l).toMatchObject({ owner: 'inspector', token: lease.token, data: { n: 1 } });
      expect(l.remainingMs).toBeGreaterThan(0);
      expect(l.remainingMs).toBeLessThanOrEqual(30_000);
      expect(report.schema).toBe(true);

      child.kill('SIGKILL');
      const got = await waiting;
      expect(got).not.toBeInstanceOf(Error);
      await (got as { release(): Promise<boolean> }).release();
      await mine.release();
      await lease.release();
    } finally {
      child.kill('SIGKILL');
    }
  });
});

describe('name registry', () => {
  /** A caller's pool whose clients log every statement they send (the locker pins its sessions from it). */
  function loggingPool(url: string) {
    const sent: { text: string; values: unknown[] | undefined }[] = [];
    const pool = new pg.Pool({ connectionString: url, max: 10 });
    pool.on('connect', (client) => {
      const query = client.query.bind(client) as (...a: unknown[]) => unknown;
      (client as unknown as { query: (...a: unknown[]) => unknown }).query = (...a: unknown[]) => {
        const q = a[0] as string | { text: string; values?: unknown[] };
        sent.push(typeof q === 'string' ? { text: q, values: a[1] as unknown[] | undefined } : { text: q.text, values: q.values ?? (a[1] as unknown[]) });
        return query(...a);
      };
    });
    return { pool, sent };
  }
  const isNameWrite = (s: { text: string }) => /pgfence\.note_lock_names/.test(s.text);

  it('stores every name exactly as given, whatever its characters, with its namespace or none', async () => {
    const names = ['reg:"quoted"', 'reg:back\\slash\\', 'reg:{braces},comma', 'reg: spaced ', 'NULL', 'reg:ünïcödé 🔒', "reg:'single'", 'reg:\\"both'];
    const plain = track(createLocker({ connectionString: db.url }));
    const spaced = track(createLocker({ connectionString: db.url, namespace: 'ns "x",\\y' }));
    await Promise.all([plain, spaced].flatMap((locker) => names.map(async (name) => (await locker.acquire(name)).release())));
    await Promise.all([plain.close(), spaced.close()]); // close() writes what is pending
    const admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
    try {
      const stored = async (namespace: string | null) =>
        (await admin.query<{ name: string; namespace: string | null }>('SELECT name, namespace FROM pgfence.lock_names WHERE key = ANY($1::int8[]) ORDER BY name COLLATE "C"', [
          names.map((n) => String(namespace === null ? lockKey(n) : lockKey(n, { namespace }))),
        ])).rows;
      const expected = (namespace: string | null) => [...names].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)).map((name) => ({ name, namespace }));
      expect(await stored(null)).toEqual(expected(null));
      expect(await stored('ns "x",\\y')).toEqual(expected('ns "x",\\y'));
    } finally {
      await admin.end();
    }
  });

  it('another connection sees a name soon after the grant; the acquire neither waits for nor sends the write; a write held up holds up nothing; one write per name, batched', async () => {
    const { pool, sent } = loggingPool(db.url);
    const admin = new pg.Client({ connectionString: db.url });
    const blocker = new pg.Client({ connectionString: db.url });
    await admin.connect();
    await blocker.connect();
    const named = async (name: string) =>
      (await admin.query(`SELECT name FROM pgfence.lock_names WHERE key = $1`, [lockKey(name)])).rows[0]?.name === name;
    // One session: the warm-up opens it, so the counted acquires reuse it (a new session sends its setup statements).
    const locker = track(createLocker({ pool, maxSessions: 1 }));
    try {
      await (await locker.acquire('reg:warm')).release(); // the session exists before anything is counted
      await eventually(() => named('reg:warm'), 5_000, 'the warm-up name');

      // Statements an acquire of a known name sends, the baseline for a new name's.
      let from = sent.length;
      await (await locker.acquire('reg:warm')).release();
      const knownAcquire = sent.slice(from).filter((s) => !isNameWrite(s)).length;

      // Writes to the registry block behind this lock: an acquire that waited for its name's write would hang.
      await blocker.query('BEGIN');
      await blocker.query('LOCK TABLE pgfence.lock_names IN SHARE MODE');
      from = sent.length;
      const fresh = await withTimeout(locker.acquire('reg:fresh'), 5_000, 'an acquire while its name write is blocked');
      // The name's write goes out in the background, on the locker's own session, and meets the locked table.
      await eventually(() => sent.slice(from).some(isNameWrite), 5_000, 'the name write');
      await fresh.release();
      // It holds up nothing queued behind it: the release reaches the server while the table is still locked.
      await eventually(async () => {
        const { rows } = await admin.query<{ free: boolean }>('SELECT pg_try_advisory_lock($1) AS free', [lockKey('reg:fresh')]);
        if (rows[0]!.free) await admin.query('SELECT pg_advisory_unlock($1)', [lockKey('reg:fresh')]);
        return rows[0]!.free;
      }, 3_000, 'the release while the name write is held up');
      expect(sent.slice(from).filter((s) => !isNameWrite(s)).length).toBe(knownAcquire);
      expect(await named('reg:fresh')).toBe(false);
      await blocker.query('COMMIT');
      // Written once the table is free, without any flush() or inspect() by the locker (a write held up is tried again).
      await eventually(() => named('reg:fresh'), 10_000, 'the new name in the registry');
      const writes = () => sent.filter(isNameWrite);
      // A write's keys: its first parameter, array text ({k1,k2,...}).
      const keysOf = (w: { values?: unknown[] }) => String(w.values![0]).slice(1, -1).split(',').map(BigInt);
      const writesOf = (name: string) => writes().filter((w) => keysOf(w).includes(lockKey(name))).length;
      const freshWrites = writesOf('reg:fresh');

      // Once per name per process, and names noted together go out in one write.
      for (let i = 0; i < 3; i++) await (await locker.acquire('reg:fresh')).release();
      const batch = await Promise.all(['reg:b', 'reg:c', 'reg:d'].map((n) => locker.acquire(n)));
      await Promise.all(batch.map((h) => h.release()));
      await eventually(async () => (await named('reg:b')) && (await named('reg:c')) && (await named('reg:d')), 5_000, 'the batch of names');
      await locker.close();
      expect(writesOf('reg:warm')).toBe(1);
      expect(writesOf('reg:fresh')).toBe(freshWrites); // known once written
      const batchWrites = writes().filter((w) => keysOf(w).includes(lockKey('reg:b')));
      expect(batchWrites.map(keysOf)).toEqual([['reg:b', 'reg:c', 'reg:d'].map((n) => lockKey(n))]);
    } finally {
      await blocker.query('ROLLBACK').catch(() => {});
      await locker.close(); // before pool.end(): the locker's sessions are pinned from the pool
      await Promise.all([admin.end(), blocker.end(), pool.end()]);
    }
  });
});
