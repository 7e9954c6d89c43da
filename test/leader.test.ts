import { beforeAll, describe, expect, it } from 'vitest';
import { createLocker, type DemotedEvent, type ElectedEvent, type LeaderElection } from '../src/index.js';
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
      await eventually(() => leaders(all).length === 1 && leaders(all)[0] !== first, 20_000, 'a new leader');
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
