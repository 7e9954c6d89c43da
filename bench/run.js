// pgfence benchmarks: each pgfence figure is measured side by side with a bare-pg baseline in the same
// run, so the ratios (the DESIGN.md targets) do not depend on the machine.
//
//   npm run bench                 build, then the full run (about a minute)
//   node bench/run.js --quick     a short smoke run (about 10 s)
//   node bench/run.js --only=3    one measurement (1..6); combine with --quick
//
// Database: DATABASE_URL, else postgres://postgres@127.0.0.1:5432/test.
// Exit status: non-zero only when a measurement crashed; missed targets are reported in the table.

import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { createLocker, lockKey, migrate } from '../dist/index.js';

const args = process.argv.slice(2);
const QUICK = args.includes('--quick');
const ONLY = (() => {
  const a = args.find((x) => x.startsWith('--only='));
  return a ? Number(a.slice('--only='.length)) : null;
})();
if ((ONLY !== null && ![1, 2, 3, 4, 5, 6].includes(ONLY)) || args.some((x) => x !== '--quick' && !x.startsWith('--only='))) {
  console.error('usage: node bench/run.js [--quick] [--only=1|2|3|4|5|6]');
  process.exit(2);
}
const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

// Durations (ms). Full: rounds alternate A/B so drift hits both sides alike; medians are reported.
const CFG = QUICK
  ? { warmupMs: 300, rounds: 3, roundMs: 300, handoffRounds: 1, handoffWarmupMs: 300, handoffMs: 1000 }
  : { warmupMs: 1000, rounds: 61, roundMs: 150, handoffRounds: 3, handoffWarmupMs: 300, handoffMs: 2000 };

/** Unique per run: key names and application_name never meet a previous (or concurrent) run's. */
const RUN_ID = `pgfb_${process.pid}_${Date.now().toString(36)}`;

// ---------------------------------------------------------------- helpers

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function withAppName(url, appName) {
  const u = new URL(url);
  u.searchParams.set('application_name', appName);
  return u.toString();
}

/** Nearest-rank percentile of an array of numbers (p in 0..100). */
function percentile(values, p) {
  if (values.length === 0) return NaN;
  const sorted = Float64Array.from(values).sort();
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))];
}
const median = (values) => percentile(values, 50);

/**
 * Statements sent and notifications received by every pg.Client in this process (pgfence's own and the
 * baselines'), to count round trips per cycle. The wrappers cost well under 1 µs per call, on both sides.
 */
const wire = { queries: 0, notifications: 0 };
{
  const query = pg.Client.prototype.query;
  pg.Client.prototype.query = function countedQuery(...a) {
    wire.queries++;
    return query.apply(this, a);
  };
  const emit = pg.Client.prototype.emit;
  pg.Client.prototype.emit = function countedEmit(event, ...a) {
    if (event === 'notification') wire.notifications++;
    return emit.call(this, event, ...a);
  };
}

/**
 * Runs `workers` copies of `cycle` in a loop for `ms` milliseconds. Returns completed cycles per second
 * (cycles that end after the deadline are not counted; every loop is drained before returning) and the
 * statements sent per cycle (over all cycles, drained ones included).
 */
async function throughput(workers, ms, cycle) {
  let stop = false;
  let counted = 0;
  let all = 0;
  const q0 = wire.queries;
  const t0 = performance.now();
  const loops = Array.from({ length: workers }, async (_, w) => {
    while (!stop) {
      await cycle(w);
      all++;
      if (!stop) counted++;
    }
  });
  await sleep(ms);
  stop = true;
  const elapsed = performance.now() - t0;
  await Promise.all(loops);
  return { rate: (counted * 1000) / elapsed, queriesPerCycle: (wire.queries - q0) / all };
}

/**
 * Alternates A and B for `rounds` rounds (flipping which goes first, so neither always runs on a
 * warmer or cooler machine) and returns the median rate of each, the median of the per-round
 * ratios A/B, every round's rates, and the statements per cycle of each.
 */
async function interleaved(rounds, ms, runA, runB) {
  const a = [];
  const b = [];
  for (let r = 0; r < rounds; r++) {
    if (r % 2 === 0) {
      a.push(await runA(ms));
      b.push(await runB(ms));
    } else {
      b.push(await runB(ms));
      a.push(await runA(ms));
    }
  }
  return {
    a: median(a.map((x) => x.rate)),
    b: median(b.map((x) => x.rate)),
    pairedRatio: median(a.map((x, i) => x.rate / b[i].rate)),
    aAll: a.map((x) => x.rate),
    bAll: b.map((x) => x.rate),
    aQueries: median(a.map((x) => x.queriesPerCycle)),
    bQueries: median(b.map((x) => x.queriesPerCycle)),
  };
}

async function connectClient(appName) {
  const client = new pg.Client({ connectionString: withAppName(DATABASE_URL, appName) });
  client.on('error', () => {}); // a lost benchmark connection surfaces as a failed query
  await client.connect();
  return client;
}

/** Closes everything given, ignoring failures (used in finally blocks). */
async function closeAll(...things) {
  await Promise.all(
    things.flat().filter(Boolean).map((t) => (typeof t.close === 'function' ? t.close() : t.end()).catch(() => {})),
  );
}

/** Sends queries one after another on one client, for callers that share it (pg's own queue is deprecated). */
function serialized(client) {
  let tail = Promise.resolve();
  return (q) => {
    const result = tail.then(() => client.query(q));
    tail = result.catch(() => {});
    return result;
  };
}

// Baseline statements: named, so the server parses them once, like pgfence's prepared statements.
const TRY = { name: 'bench_try', text: 'SELECT pg_try_advisory_lock($1::int8) AS ok' };
const UNLOCK = { name: 'bench_unlock', text: 'SELECT pg_advisory_unlock($1::int8) AS ok' };
const LOCK = { name: 'bench_lock', text: 'SELECT pg_advisory_lock($1::int8)' };

// ---------------------------------------------------------------- results table

const rows = [];
/** Per-round figures and other details, printed under the table. */
const notes = [];
const roundList = (xs) => xs.map((x) => Math.round(x)).join(', ');
const perCycle = (x) => (Number.isFinite(x) ? x.toFixed(2) : '—');
/**
 * One table row. `pass`: true/false against the target, or null for informational rows.
 */
function row(measurement, pgfence, baseline, ratio, target, pass) {
  rows.push({ measurement, pgfence, baseline, ratio, target, pass });
}
const fmtRate = (x) => (Number.isFinite(x) ? `${Math.round(x).toLocaleString('en-US')}/s` : '—');
const fmtMs = (x) => (Number.isFinite(x) ? `${x.toFixed(3)} ms` : '—');
const fmtPct = (x) => (Number.isFinite(x) ? `${(x * 100).toFixed(1)}%` : '—');
const fmtRatio = (x) => (Number.isFinite(x) ? `${x.toFixed(2)}x` : '—');
const verdict = (pass) => (pass === null ? 'info' : pass ? 'pass' : 'FAIL');

function printTable() {
  const header = ['measurement', 'pgfence', 'baseline', 'ratio', 'target', 'pass/fail'];
  const body = rows.map((r) => [r.measurement, r.pgfence, r.baseline, r.ratio, r.target, verdict(r.pass)]);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((b) => String(b[i]).length)));
  const line = (cells) => cells.map((c, i) => (i === 0 ? String(c).padEnd(widths[i]) : String(c).padStart(widths[i]))).join('  ');
  console.log(line(header));
  console.log(widths.map((w) => '-'.repeat(w)).join('  '));
  for (const b of body) console.log(line(b));
}

// ---------------------------------------------------------------- 1. uncontended acquire+release

async function benchUncontended() {
  const name = `${RUN_ID}/uncontended`;
  const key = lockKey(`${RUN_ID}/uncontended-baseline`).toString();
  const locker = createLocker({ connectionString: withAppName(DATABASE_URL, `${RUN_ID}_m1`) });
  const client = await connectClient(`${RUN_ID}_m1b`);
  try {
    const pgfenceCycle = async () => {
      const h = await locker.acquire(name);
      await h.release();
    };
    const baselineCycle = async () => {
      const { rows: r } = await client.query({ ...TRY, values: [key] });
      if (!r[0].ok) throw new Error('baseline: uncontended try_lock failed');
      await client.query({ ...UNLOCK, values: [key] });
    };
    await throughput(1, CFG.warmupMs, pgfenceCycle);
    await throughput(1, CFG.warmupMs, baselineCycle);
    const r = await interleaved(
      CFG.rounds,
      CFG.roundMs,
      (ms) => throughput(1, ms, pgfenceCycle),
      (ms) => throughput(1, ms, baselineCycle),
    );
    // Side by side: each round pairs a pgfence run with a baseline run next to it; the ratio is the
    // median of those per-round ratios, so drift in the machine's speed cancels out.
    const ratio = r.pairedRatio;
    notes.push(`1. rounds (cycles/s): pgfence ${roundList(r.aAll)}; baseline ${roundList(r.bAll)}; ratio of medians ${fmtRatio(r.a / r.b)}`);
    row('1. uncontended acquire+release, 1 worker', fmtRate(r.a), fmtRate(r.b), fmtRatio(ratio), '>= 0.90x', ratio >= 0.9);
    row('1. ... statements per cycle', perCycle(r.aQueries), perCycle(r.bQueries), '', '', null);
    return r;
  } finally {
    await closeAll(locker, client);
  }
}

// ---------------------------------------------------------------- 2. 64 workers, distinct keys

async function benchConcurrent() {
  const WORKERS = 64;
  const names = Array.from({ length: WORKERS }, (_, w) => `${RUN_ID}/concurrent/${w}`);
  const keys = Array.from({ length: WORKERS }, (_, w) => lockKey(`${RUN_ID}/concurrent-baseline/${w}`).toString());
  const locker = createLocker({ connectionString: withAppName(DATABASE_URL, `${RUN_ID}_m2`), maxSessions: 2 });
  const client = await connectClient(`${RUN_ID}_m2b`);
  try {
    const pgfenceCycle = async (w) => {
      const h = await locker.acquire(names[w]);
      await h.release();
    };
    const query = serialized(client); // the 64 workers queue up on the one connection
    const baselineCycle = async (w) => {
      const { rows: r } = await query({ ...TRY, values: [keys[w]] });
      if (!r[0].ok) throw new Error('baseline: distinct-key try_lock failed');
      await query({ ...UNLOCK, values: [keys[w]] });
    };
    await throughput(WORKERS, CFG.warmupMs, pgfenceCycle);
    await throughput(WORKERS, CFG.warmupMs, baselineCycle);
    const r = await interleaved(
      CFG.rounds,
      CFG.roundMs,
      (ms) => throughput(WORKERS, ms, pgfenceCycle),
      (ms) => throughput(WORKERS, ms, baselineCycle),
    );
    const ratio = r.pairedRatio;
    notes.push(`2. rounds (cycles/s): pgfence ${roundList(r.aAll)}; baseline ${roundList(r.bAll)}; ratio of medians ${fmtRatio(r.a / r.b)}`);
    row('2. 64 workers, 64 keys, maxSessions 2', fmtRate(r.a), fmtRate(r.b), fmtRatio(ratio), '>= 3.00x', ratio >= 3);
    row('2. ... statements per cycle', perCycle(r.aQueries), perCycle(r.bQueries), '', '', null);
    return r;
  } finally {
    await closeAll(locker, client);
  }
}

// ---------------------------------------------------------------- 3. contended hand-off

/**
 * One round: `workers` loops of acquire -> record grant -> release on one lock, for CFG.handoffMs
 * after a warm-up. `acquire(w)` resolves once worker w holds the lock and returns its release function.
 * Returns the raw figures of the measuring window; `summarize` merges rounds.
 */
async function handoffRound(workers, acquire) {
  let phase = 'warmup'; // -> 'measure' -> 'stop'
  let holder = null; // worker holding the lock right now, as this process sees it
  let lastHolder = null; // worker of the previous grant
  let releasedAt = null; // performance.now() when the previous holder called release()
  const r = { grants: 0, changes: 0, violations: 0, latencies: [], perWorker: new Array(workers).fill(0) };
  const loops = Array.from({ length: workers }, async (_, w) => {
    while (phase !== 'stop') {
      const release = await acquire(w);
      const now = performance.now();
      if (holder !== null) r.violations++; // two holders at once: mutual exclusion broken
      holder = w;
      if (phase === 'measure') {
        r.grants++;
        r.perWorker[w]++;
        if (releasedAt !== null) r.latencies.push(now - releasedAt);
        if (lastHolder !== null && lastHolder !== w) r.changes++;
      }
      lastHolder = w;
      holder = null;
      releasedAt = performance.now();
      await release();
    }
  });
  await sleep(CFG.handoffWarmupMs);
  phase = 'measure';
  releasedAt = null;
  lastHolder = null;
  const q0 = wire.queries;
  const n0 = wire.notifications;
  const t0 = performance.now();
  await sleep(CFG.handoffMs);
  phase = 'stop';
  r.elapsedMs = performance.now() - t0;
  r.queries = wire.queries - q0; // statements sent during the window (drained ones excluded)
  r.notifications = wire.notifications - n0;
  await Promise.all(loops);
  return r;
}

/** Merges rounds: latencies pooled, rates over the summed windows. */
function summarize(rounds) {
  const sum = (f) => rounds.reduce((acc, r) => acc + f(r), 0);
  const latencies = rounds.flatMap((r) => r.latencies);
  const grants = sum((r) => r.grants);
  const perWorker = rounds[0].perWorker.map((_, w) => sum((r) => r.perWorker[w]));
  return {
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    over10ms: latencies.filter((x) => x > 10).length,
    handoffs: latencies.length,
    changeShare: sum((r) => r.changes) / Math.max(1, sum((r) => Math.max(0, r.grants - 1))),
    grantsPerSec: (grants * 1000) / sum((r) => r.elapsedMs),
    roundRates: rounds.map((r) => (r.grants * 1000) / r.elapsedMs),
    violations: sum((r) => r.violations),
    minWorkerShare: Math.min(...perWorker) / Math.max(1, grants),
    queriesPerGrant: sum((r) => r.queries) / grants,
    notificationsPerGrant: sum((r) => r.notifications) / grants,
  };
}

async function benchHandoff() {
  const WORKERS = 8;
  const generous = { timeoutMs: 60_000 };
  const keyName = (variant, round) => `${RUN_ID}/handoff/${variant}/${round}`;
  // pgfence, 8 lockers (one per simulated instance), maxSessions 1 each.
  const lockers = Array.from({ length: WORKERS }, (_, w) =>
    createLocker({ connectionString: withAppName(DATABASE_URL, `${RUN_ID}_m3_${w}`), maxSessions: 1 }),
  );
  // pgfence, the 8 workers share one locker.
  const shared = createLocker({ connectionString: withAppName(DATABASE_URL, `${RUN_ID}_m3s`) });
  // Baseline: 8 dedicated connections looping a blocking pg_advisory_lock / pg_advisory_unlock.
  const clients = [];
  try {
    for (let w = 0; w < WORKERS; w++) clients.push(await connectClient(`${RUN_ID}_m3b_${w}`));
    // Open every locker's session before any clock starts.
    for (const l of [...lockers, shared]) await (await l.acquire(`${RUN_ID}/handoff/warm`)).release();

    const variants = {
      own: (round) => {
        const name = keyName('lockers', round);
        return handoffRound(WORKERS, async (w) => {
          const h = await lockers[w].acquire(name, generous);
          return () => h.release();
        });
      },
      base: (round) => {
        const key = lockKey(keyName('baseline', round)).toString();
        return handoffRound(WORKERS, async (w) => {
          await clients[w].query({ ...LOCK, values: [key] });
          return () => clients[w].query({ ...UNLOCK, values: [key] });
        });
      },
      one: (round) => {
        const name = keyName('shared', round);
        return handoffRound(WORKERS, async () => {
          const h = await shared.acquire(name, generous);
          return () => h.release();
        });
      },
    };
    const results = { own: [], base: [], one: [] };
    for (let round = 0; round < CFG.handoffRounds; round++) {
      // Rotate the order, so that no variant always runs first or last.
      const order = ['own', 'base', 'one'];
      for (let i = 0; i < round % 3; i++) order.push(order.shift());
      for (const v of order) results[v].push(await variants[v](round));
    }
    const own = summarize(results.own);
    const base = summarize(results.base);
    const one = summarize(results.one);

    const lbl = '3. hand-off, 8 workers / 8 lockers:';
    row(`${lbl} p50`, fmtMs(own.p50), fmtMs(base.p50), fmtRatio(own.p50 / base.p50), '<= 1 ms', own.p50 <= 1);
    row(`${lbl} p99`, fmtMs(own.p99), fmtMs(base.p99), fmtRatio(own.p99 / base.p99), '', null);
    row(`${lbl} hand-offs > 10 ms`, `${own.over10ms} of ${own.handoffs}`, `${base.over10ms} of ${base.handoffs}`, '', '', null);
    row(`${lbl} holder changes`, fmtPct(own.changeShare), fmtPct(base.changeShare), '', '>= 90%', own.changeShare >= 0.9);
    const rate = own.grantsPerSec / base.grantsPerSec;
    row(`${lbl} grants/s`, fmtRate(own.grantsPerSec), fmtRate(base.grantsPerSec), fmtRatio(rate), '>= 0.50x', rate >= 0.5);
    row(`${lbl} fewest grants, 1 worker`, fmtPct(own.minWorkerShare), fmtPct(base.minWorkerShare), '', '(fair: 12.5%)', null);
    row(`${lbl} statements per grant`, perCycle(own.queriesPerGrant), perCycle(base.queriesPerGrant), '', '', null);
    row(`${lbl} notifications per grant`, perCycle(own.notificationsPerGrant), perCycle(base.notificationsPerGrant), '', '', null);
    row(`${lbl} overlapping holders`, String(own.violations), String(base.violations), '', '= 0', own.violations === 0 && base.violations === 0);
    const lbl2 = '3b. hand-off, 8 workers / 1 locker:';
    row(`${lbl2} p50`, fmtMs(one.p50), fmtMs(base.p50), fmtRatio(one.p50 / base.p50), '', null);
    row(`${lbl2} p99`, fmtMs(one.p99), fmtMs(base.p99), fmtRatio(one.p99 / base.p99), '', null);
    row(`${lbl2} holder changes`, fmtPct(one.changeShare), fmtPct(base.changeShare), '', '', null);
    const rate2 = one.grantsPerSec / base.grantsPerSec;
    row(`${lbl2} grants/s`, fmtRate(one.grantsPerSec), fmtRate(base.grantsPerSec), fmtRatio(rate2), '', null);
    row(`${lbl2} statements per grant`, perCycle(one.queriesPerGrant), perCycle(base.queriesPerGrant), '', '', null);
    row(`${lbl2} overlapping holders`, String(one.violations), String(base.violations), '', '= 0', one.violations === 0);
    notes.push(
      `3. rounds (grants/s): 8 lockers ${roundList(own.roundRates)}; baseline ${roundList(base.roundRates)}; 1 locker ${roundList(one.roundRates)}`,
    );
  } finally {
    await closeAll(lockers, shared, clients);
  }
}

// ---------------------------------------------------------------- 4. 10,000 locks held at once

async function benchManyLocks() {
  const N = 10_000;
  const CHUNK = 2000;
  const maxSessions = 2; // the default
  const appName = `${RUN_ID}_m4`;
  const names = Array.from({ length: N }, (_, i) => `${RUN_ID}/many/${i}`);
  const expected = new Set(names.map((n) => lockKey(n).toString()));
  const locker = createLocker({ connectionString: withAppName(DATABASE_URL, appName) });
  const observer = await connectClient(`${RUN_ID}_m4_observer`);
  let handles = [];
  try {
    await (await locker.acquire(`${RUN_ID}/many/warm`)).release(); // connect before the clock starts
    const t0 = performance.now();
    for (let i = 0; i < N; i += CHUNK) {
      const chunk = names.slice(i, i + CHUNK);
      handles.push(...(await Promise.all(chunk.map((n) => locker.acquire(n, { timeoutMs: 60_000 })))));
    }
    const acquireMs = performance.now() - t0;

    // From another connection: which backends of this locker hold which advisory locks.
    const { rows: held } = await observer.query(
      `SELECT l.pid, ((l.classid::int8 << 32) | l.objid::int8)::text AS key
         FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE a.application_name = $1 AND l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted`,
      [appName],
    );
    const { rows: conns } = await observer.query(
      'SELECT pid, state, query FROM pg_stat_activity WHERE application_name = $1',
      [appName],
    );
    const heldKeys = new Set(held.map((r) => r.key));
    const allOurs = [...heldKeys].every((k) => expected.has(k)) && heldKeys.size === held.length;
    const holdingPids = new Set(held.map((r) => r.pid));
    const others = conns.filter((c) => !holdingPids.has(c.pid));

    const t1 = performance.now();
    await Promise.all(handles.map((h) => h.release()));
    const releaseMs = performance.now() - t1;
    handles = [];
    const { rows: after } = await observer.query(
      `SELECT count(*)::int AS n FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE a.application_name = $1 AND l.locktype = 'advisory' AND l.granted`,
      [appName],
    );

    const lbl = `4. ${N.toLocaleString('en-US')} locks, 1 locker:`;
    row(`${lbl} granted in pg_locks`, `${held.length}${allOurs ? '' : ' (unexpected keys!)'}`, '', '', `= ${N}`, held.length === N && allOurs);
    row(`${lbl} connections holding them`, String(holdingPids.size), '', '', `<= ${maxSessions}`, holdingPids.size <= maxSessions);
    row(`${lbl} other locker connections`, `${others.length}${others.length ? ` (${others.map((c) => c.query.slice(0, 20)).join(', ')})` : ''}`, '', '', '(listener etc.)', null);
    row(`${lbl} acquire all`, fmtMs(acquireMs), '', '', '', null);
    row(`${lbl} release all`, fmtMs(releaseMs), '', '', '', null);
    row(`${lbl} left in pg_locks after release`, String(after[0].n), '', '', '= 0', after[0].n === 0);
  } finally {
    await Promise.all(handles.map((h) => h.release().catch(() => {})));
    await closeAll(locker, observer);
  }
}

// ---------------------------------------------------------------- 5. fenced locks and leases vs one durable commit

/**
 * A fenced acquire issues its token in the grant's own statement, one durable commit; a lease is taken
 * and released by two durable statements. The floor is one durable commit (an upsert with
 * synchronous_commit on) on a bare pinned client, measured side by side: a fenced cycle should cost
 * about the floor plus one round trip (the unlock), a lease cycle about two floors.
 */
async function benchDurable() {
  await migrate({ connectionString: DATABASE_URL });
  const locker = createLocker({ connectionString: withAppName(DATABASE_URL, `${RUN_ID}_m5`) });
  const client = await connectClient(`${RUN_ID}_m5b`);
  try {
    await client.query('CREATE TABLE IF NOT EXISTS pgfence_bench_commit (id int PRIMARY KEY, n bigint NOT NULL)');
    const COMMIT = { name: 'bench_commit', text: 'INSERT INTO pgfence_bench_commit VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET n = pgfence_bench_commit.n + 1' };
    const floorCycle = async () => {
      await client.query(COMMIT);
    };
    const fencedCycle = async () => {
      const h = await locker.acquire(`${RUN_ID}/fenced`, { fencing: true });
      if (h.token === null) throw new Error('fenced acquire without a token');
      await h.release();
    };
    const leaseCycle = async () => {
      const l = await locker.lease(`${RUN_ID}/lease`, { ttlMs: 10_000, renew: false });
      await l.release();
    };
    for (const c of [floorCycle, fencedCycle, leaseCycle]) await throughput(1, CFG.warmupMs / 2, c);
    const rounds = Math.max(3, Math.round(CFG.rounds / 4));
    const roundMs = CFG.roundMs * 3;
    const fenced = await interleaved(rounds, roundMs, (ms) => throughput(1, ms, fencedCycle), (ms) => throughput(1, ms, floorCycle));
    const lease = await interleaved(rounds, roundMs, (ms) => throughput(1, ms, leaseCycle), (ms) => throughput(1, ms, floorCycle));
    notes.push(
      `5. rounds (cycles/s): fenced ${roundList(fenced.aAll)} vs floor ${roundList(fenced.bAll)}; lease ${roundList(lease.aAll)} vs floor ${roundList(lease.bAll)}`,
    );
    const floorMs = 1000 / fenced.b;
    const leaseFloorMs = 1000 / lease.b;
    row('5. fenced acquire+release', fmtRate(fenced.a), fmtRate(fenced.b), fmtRatio(fenced.pairedRatio), 'vs one durable commit', null);
    row('5. ... fenced cycle, and the floor', fmtMs(1000 / fenced.a), fmtMs(floorMs), '', '<= floor + 1 ms', 1000 / fenced.a <= floorMs + 1);
    row('5. ... statements per fenced cycle', perCycle(fenced.aQueries), perCycle(fenced.bQueries), '', '= 2 (grant+token, unlock)', fenced.aQueries <= 2.05);
    row('5. lease acquire+release', fmtRate(lease.a), fmtRate(lease.b), fmtRatio(lease.pairedRatio), 'vs one durable commit', null);
    row('5. ... lease cycle, in durable commits', `${(1000 / lease.a / leaseFloorMs).toFixed(2)}`, '1.00', '', 'info (2 commits: take, release)', null);
    row('5. ... statements per lease cycle', perCycle(lease.aQueries), perCycle(lease.bQueries), '', '= 2', lease.aQueries <= 2.05);
  } finally {
    await client.query('DROP TABLE IF EXISTS pgfence_bench_commit').catch(() => {});
    await closeAll(locker, client);
  }
}

// ---------------------------------------------------------------- 6. names visible to other processes

/**
 * How soon another connection sees a just-granted lock's name in pgfence's registry (what inspect() and
 * `pgfence status` of another process read). The registry writes in the background, batched, never on
 * the acquire's path; DESIGN: visible within ~50 ms. The other side polls with a bare pinned client.
 */
async function benchNameVisibility() {
  await migrate({ connectionString: DATABASE_URL });
  const locker = createLocker({ connectionString: withAppName(DATABASE_URL, `${RUN_ID}_m6`) });
  const client = await connectClient(`${RUN_ID}_m6b`);
  const SEEN = { name: 'bench_name_seen', text: 'SELECT 1 FROM pgfence.lock_names WHERE key = $1::int8' };
  try {
    await (await locker.acquire(`${RUN_ID}/names/warm-up`)).release(); // the session and a pool connection exist
    const samples = [];
    for (let i = 0; i < (QUICK ? 10 : 40); i++) {
      const name = `${RUN_ID}/names/${i}`;
      const key = lockKey(name).toString();
      const h = await locker.acquire(name);
      const grantedAt = performance.now();
      while ((await client.query({ ...SEEN, values: [key] })).rowCount === 0) {
        if (performance.now() - grantedAt > 5000) throw new Error(`name ${name} not visible after 5 s`);
      }
      samples.push(performance.now() - grantedAt);
      await h.release();
      await sleep(20); // each name starts its own batch
    }
    const p50 = median(samples);
    const p95 = percentile(samples, 95);
    notes.push(`6. grant -> name visible to another connection (ms): ${samples.map((x) => x.toFixed(1)).join(', ')}`);
    row('6. name visible to others after grant, p50', fmtMs(p50), '', '', '<= 50 ms', p50 <= 50);
    row('6. ... p95, max', fmtMs(p95), fmtMs(Math.max(...samples)), '', 'info', null);
  } finally {
    await closeAll(locker, client);
  }
}

// ---------------------------------------------------------------- main

/** Share of the machine's CPU time that was busy over `ms` (Linux /proc/stat), or null elsewhere. */
async function machineBusy(ms) {
  const sample = () => {
    const f = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
    return { idle: f[3] + (f[4] ?? 0), total: f.reduce((a, b) => a + b, 0) };
  };
  try {
    const a = sample();
    await sleep(ms);
    const b = sample();
    return 1 - (b.idle - a.idle) / Math.max(1, b.total - a.total);
  } catch {
    return null;
  }
}

const loadavg = () => os.loadavg().map((x) => x.toFixed(2)).join(' ');

async function environment() {
  const client = await connectClient(`${RUN_ID}_env`);
  try {
    const { rows: v } = await client.query(
      `SELECT current_setting('server_version') AS version, current_setting('max_locks_per_transaction') AS mlpt,
              current_setting('max_connections') AS maxconn, current_setting('synchronous_commit') AS sync`,
    );
    // One round trip, for scale (median of a few hundred SELECT 1).
    const q = { name: 'bench_one', text: 'SELECT 1' };
    for (let i = 0; i < 200; i++) await client.query(q);
    const rtts = [];
    for (let i = 0; i < 500; i++) {
      const t = performance.now();
      await client.query(q);
      rtts.push(performance.now() - t);
    }
    return { ...v[0], rttUs: median(rtts) * 1000 };
  } finally {
    await client.end().catch(() => {});
  }
}

const MEASUREMENTS = [
  [1, 'uncontended acquire+release', benchUncontended],
  [2, '64 workers on 64 keys', benchConcurrent],
  [3, 'contended hand-off', benchHandoff],
  [4, '10,000 locks held at once', benchManyLocks],
  [5, 'fenced locks and leases vs one durable commit', benchDurable],
  [6, 'lock names visible to other processes', benchNameVisibility],
];

async function main() {
  const started = performance.now();
  const env = await environment();
  const busy = await machineBusy(QUICK ? 300 : 1000); // before anything of ours runs
  const cpus = os.cpus();
  console.log(`pgfence bench${QUICK ? ' (--quick)' : ''}${ONLY ? ` (--only=${ONLY})` : ''}  run ${RUN_ID}`);
  const pgVersion = createRequire(import.meta.url)('pg/package.json').version;
  console.log(`node ${process.version}, pg ${pgVersion}, ${os.availableParallelism()} cores (${cpus[0]?.model?.trim() ?? 'unknown cpu'})`);
  console.log(`PostgreSQL ${env.version}, max_connections ${env.maxconn}, max_locks_per_transaction ${env.mlpt}, synchronous_commit ${env.sync}`);
  console.log(
    `machine before start: ${busy === null ? '?' : fmtPct(busy)} CPU busy, load average ${loadavg()}` +
      ' (other work on this machine skews every figure; the ratios less so)',
  );
  console.log(`SELECT 1 round trip: ${env.rttUs.toFixed(0)} µs median; baseline statements are named (prepared), as pgfence's are`);
  console.log(
    `1-2: ${CFG.rounds} rounds x ${CFG.roundMs} ms per side, alternating; rates are medians, ratios the median of per-round ratios; ` +
      `3: ${CFG.handoffRounds} rounds x (${CFG.handoffWarmupMs} ms warm-up + ${CFG.handoffMs} ms) per variant, rotating (pooled)`,
  );
  console.log('');

  let crashed = false;
  for (const [n, title, fn] of MEASUREMENTS) {
    if (ONLY !== null && ONLY !== n) continue;
    const t = performance.now();
    process.stderr.write(`[${n}] ${title} ... `);
    try {
      await fn();
      process.stderr.write(`${((performance.now() - t) / 1000).toFixed(1)} s\n`);
    } catch (err) {
      crashed = true;
      process.stderr.write('crashed\n');
      console.error(err);
      row(`${n}. ${title}`, `ERROR: ${err?.message ?? err}`.slice(0, 60), '', '', '', false);
    }
  }
  console.log('');
  printTable();
  console.log('');
  for (const n of notes) console.log(n);
  console.log(`total ${((performance.now() - started) / 1000).toFixed(1)} s; load average at the end ${loadavg()}`);
  return crashed ? 1 : 0;
}

main().then(
  (code) => {
    process.exitCode = code;
    // Everything was closed; if some handle still keeps the loop alive, say so instead of hanging.
    setTimeout(() => {
      console.error('bench: handles still open after the run; exiting');
      process.exit(code || 1);
    }, 5000).unref();
  },
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
