import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  createLocker,
  InvalidArgumentError,
  LockLostError,
  type AcquiredEvent,
  type DemotedEvent,
  type ElectedEvent,
  type LeaderElection,
  type PgfenceError,
} from '../src/index.js';
import { appName, eventually, killBackends, sleep, track, useMigratedDatabase } from './support/db.js';

let db: Awaited<ReturnType<typeof useMigratedDatabase>>;

beforeAll(async () => {
  db = await useMigratedDatabase('leader');
});

function candidates(n: number, name: string) {
  const log: string[] = [];
  const all = Array.from({ length: n }, (_, i) => {
    const app = appName(`leader${i}`);
    const locker = createLocker({ connectionString: db.urlWith({ application_name: app }), keepaliveMs: 500 });
    track(locker);
    const election = locker.leader(name, { ttlMs: 2000 });
    election.on('elected', (e: ElectedEvent) => {
      // At the moment one is elected, no other candidate believes it leads.
      const others = all.filter((c) => c.election !== election && c.election.isLeader);
      log.push(`elected ${i} ${e.epoch} others-leading=${others.length}`);
    });
    election.on('demoted', (e: DemotedEvent) => log.push(`demoted ${i} ${e.epoch} ${e.reason}`));
    return { i, app, locker, election };
  });
  return { all, log };
}

const leaders = <T extends { election: LeaderElection }>(all: T[]): T[] => all.filter((c) => c.election.isLeader);

describe('leader election', () => {
  it('three candidates: the leader’s backend is killed, the old leader is demoted first, the new one has a higher epoch', async () => {
    const { all, log } = candidates(3, 'leader:kill');
    let overlap = 0;
    const sampler = setInterval(() => {
      if (leaders(all).length > 1) overlap++;
    }, 1);
    try {
      await eventually(() => leaders(all).length === 1, 15_000, 'a leader');
      const first = leaders(all)[0]!;
      const firstEpoch = first.election.epoch!;
      expect(await first.election.whenElected()).toBe(firstEpoch);
      await killBackends(db.url, first.app);
      // The next term may go to any candidate, the old leader included (it campaigns again once demoted):
      // what holds is a demotion first, then a term with a higher epoch.
      await eventually(() => leaders(all).length === 1 && leaders(all)[0]!.election.epoch! > firstEpoch, 20_000, 'a new term');
      const second = leaders(all)[0]!;
      expect(second.election.epoch!).toBeGreaterThan(firstEpoch);
      const demotedAt = log.findIndex((l) => l.startsWith(`demoted ${first.i} ${firstEpoch} session-lost`));
      const electedAt = log.findIndex((l) => l.startsWith(`elected ${second.i} ${second.election.epoch}`));
      expect(demotedAt).toBeGreaterThanOrEqual(0);
      expect(electedAt).toBeGreaterThan(demotedAt);
      expect(log.filter((l) => l.startsWith('elected')).every((l) => l.endsWith('others-leading=0'))).toBe(true);
      expect(overlap).toBe(0);
    } finally {
      clearInterval(sampler);
    }
  });

  it('a resigning leader hands over; a resigned candidate never leads again', async () => {
    const { all, log } = candidates(2, 'leader:resign');
    await eventually(() => leaders(all).length === 1, 15_000, 'a leader');
    const first = leaders(all)[0]!;
    const other = all.find((c) => c !== first)!;
    const epoch = first.election.epoch!;
    const signal = first.election.signal!;
    await first.election.resign();
    expect(signal.aborted).toBe(true);
    expect(first.election.isLeader).toBe(false);
    expect(log).toContain(`demoted ${first.i} ${epoch} resigned`);
    const next = await other.election.whenElected();
    expect(next).toBeGreaterThan(epoch);
    expect(first.election.isLeader).toBe(false);
    await expect(first.election.whenElected()).rejects.toThrow(/resigned/);
  });

  it('whenElected refuses what is not an options object or an AbortSignal, and the election carries on unharmed', async () => {
    const { all } = candidates(1, 'leader:args');
    const { election } = all[0]!;
    const bad: unknown[] = [null, 'x', 5, [], { signal: 'stop' }, { signal: {} }, { signal: null }, { signal: { aborted: false, addEventListener() {} } }, { signl: new AbortController().signal }];
    for (const opts of bad) {
      const err = await Promise.resolve()
        .then(() => election.whenElected(opts as never))
        .then(
          () => null,
          (e: unknown) => e,
        );
      expect(err, JSON.stringify(opts) ?? String(opts)).toBeInstanceOf(InvalidArgumentError);
    }
    // Elected and resigned afterwards without an uncaught error from a listener left behind.
    const epoch = await election.whenElected();
    expect(election.epoch).toBe(epoch);
    await election.resign();
    expect(election.isLeader).toBe(false);
  });

  it('a leader whose event loop was blocked past its lease sees isLeader false at once, before any timer runs', async () => {
    const { all, log } = candidates(1, 'leader:paused');
    const { election, i } = all[0]!;
    const epoch = await election.whenElected();
    const signal = election.signal!;
    expect(election.isLeader).toBe(true);
    // A pause (SIGSTOP, a long GC) as the process sees it: no timer runs for longer than the lease (2000 ms).
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 2500);
    // Read synchronously, as the application's first timer after the pause would.
    const seen = { isLeader: election.isLeader, epoch: election.epoch, signal: election.signal, aborted: signal.aborted };
    expect(seen).toEqual({ isLeader: false, epoch: null, signal: null, aborted: true });
    expect(signal.reason).toBeInstanceOf(LockLostError);
    expect((signal.reason as LockLostError).reason).toBe('lease-expired');
    expect(log).toContain(`demoted ${i} ${epoch} lease-expired`);
  });

  it('the session guard of a term is reported as kind leader, with a name, not as an anonymous lock', async () => {
    const app = appName('leaderguard');
    const locker = track(createLocker({ connectionString: db.urlWith({ application_name: app }) }));
    const acquired: AcquiredEvent[] = [];
    locker.on('acquired', (ev: AcquiredEvent) => acquired.push(ev));
    const election = locker.leader('leader:guard', { ttlMs: 2000 });
    const epoch = await election.whenElected();
    await eventually(() => acquired.some((ev) => ev.kind === 'leader'), 5000, 'the guard');
    const guard = acquired.find((ev) => ev.kind === 'leader')!;
    expect(guard.name).toBe(`leader:guard (leader, epoch ${epoch})`);
    expect(acquired.filter((ev) => ev.kind === 'lock')).toEqual([]);
    const report = await locker.inspect();
    expect(report.locks.find((l) => l.key === guard.key)?.name).toBe(guard.name);
    await election.resign();
  });

  it('closing the locker ends the campaign with PGFENCE_CLOSED; resigning ends a term with PGFENCE_RESIGNED', async () => {
    const [a, b] = candidates(2, 'leader:close').all;
    await eventually(() => a!.election.isLeader || b!.election.isLeader, 15_000, 'a leader');
    const [leader, waiting] = a!.election.isLeader ? [a!, b!] : [b!, a!];
    const term = leader.election.signal!;
    const pending = waiting.election.whenElected().then(
      () => null,
      (e: unknown) => e,
    );
    await waiting.locker.close();
    const err = (await pending) as PgfenceError;
    expect(err.code).toBe('PGFENCE_CLOSED');
    expect(() => waiting.locker.leader('leader:close')).toThrow(expect.objectContaining({ code: 'PGFENCE_CLOSED' }));
    await leader.election.resign();
    expect((term.reason as PgfenceError).code).toBe('PGFENCE_RESIGNED');
    await expect(leader.election.whenElected()).rejects.toMatchObject({ code: 'PGFENCE_RESIGNED' });
  });
  it('a lease granted to a candidate as its locker closes is released, never leaked', async () => {
    const judge = track(createLocker({ connectionString: db.url }));
    for (const [i, delayMs] of [0, 0, 1, 2, 3, 5, 10, 0, 1, 3].entries()) {
      const name = `leader:late:${i}`;
      const a = createLocker({ connectionString: db.url });
      const b = createLocker({ connectionString: db.url });
      try {
        const first = a.leader(name, { ttlMs: 30_000 });
        await first.whenElected();
        b.leader(name, { ttlMs: 30_000 });
        await eventually(() => b.stats().waiting === 1, 15_000, 'the second candidate to wait');
        await a.close(); // the leader's lease goes back, and the waiting candidate is woken
        await sleep(delayMs);
        await b.close();
        const lease = await judge.tryLease(name);
        expect(lease, `iteration ${i}: the lease was left held`).not.toBeNull();
        await lease!.release();
      } finally {
        await Promise.all([a.close(), b.close()]);
      }
      }
    });
});

describe('a lease handle read after a pause', () => {
  it('its signal and release() already know the lease ran out, before the deadline timer runs', async () => {
    const locker = track(createLocker({ connectionString: db.url }));
    const handle = await locker.lease('lease:paused', { ttlMs: 300 });
    const lost: string[] = [];
    locker.on('lost', (ev: { reason: string }) => lost.push(ev.reason));
    expect(handle.signal.aborted).toBe(false);
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 500);
    const aborted = handle.signal.aborted;
    expect(aborted).toBe(true);
    expect((handle.signal.reason as LockLostError).reason).toBe('lease-expired');
    expect(lost).toEqual(['lease-expired']);
    expect(await handle.release()).toBe(false);
    expect(locker.stats().held).toBe(0);
  });
});

describe('a leader process paused past its lease (SIGSTOP, then SIGCONT)', () => {
  it('its first application timer after the pause reads isLeader false and an aborted lease signal', async () => {
    const ttlMs = 1000;
    const child = spawn(process.execPath, [new URL('./fixtures/paused-leader.mjs', import.meta.url).pathname, db.url, 'leader:sigstop', String(ttlMs)], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
    try {
      const { elected } = JSON.parse((await lines.next()).value as string) as { elected: string };
      child.kill('SIGSTOP');
      // A newer term and a newer lease holder: the paused process's term and lease are over.
      const locker = track(createLocker({ connectionString: db.url }));
      const next = await locker.leader('leader:sigstop', { ttlMs }).whenElected();
      expect(next).toBeGreaterThan(BigInt(elected));
      const lease = await locker.lease('leader:sigstop:lease', { timeoutMs: 20_000 });
      child.kill('SIGCONT');
      const seen = JSON.parse((await lines.next()).value as string) as { gapMs: number; isLeader: boolean; epoch: string; leaseAborted: boolean };
      expect(seen.gapMs).toBeGreaterThanOrEqual(300);
      expect(seen).toMatchObject({ isLeader: false, epoch: 'null', leaseAborted: true });
      await lease.release();
    } finally {
      child.kill('SIGKILL');
    }
  });
});
