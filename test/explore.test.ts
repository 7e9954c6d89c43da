// Exploration: random operations and faults over every lock kind, the history checked by
// test/explore/checker.ts. The seed is printed; replay one with
//   npm run test:explore -- --seed N --minutes M
// (PGFENCE_EXPLORE_SEED / PGFENCE_EXPLORE_MINUTES). Without them: one short round, a new seed each run.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, inject, it } from 'vitest';
import { type PrivateCluster, privateClusterUnavailable, startPrivateCluster } from './support/cluster.js';
import { stringifyHistory } from './explore/history-json.js';
import { exploreRound, type RoundResult } from './explore/run.js';

const SHORT_ROUND_MS = 25_000;
const ROUND_MS = 60_000;
const seedFromEnv = process.env.PGFENCE_EXPLORE_SEED;
const minutes = Number(process.env.PGFENCE_EXPLORE_MINUTES ?? 0);
const firstSeed = seedFromEnv === undefined ? Math.floor(Math.random() * 2 ** 31) : Number(seedFromEnv);
const totalMs = minutes > 0 ? minutes * 60_000 : SHORT_ROUND_MS;
const requireTopology = process.env.PGFENCE_REQUIRE_TOPOLOGY_TESTS === '1';
/** A folder to save each round's history in (explore-<seed>.json), for a closer look. */
const saveTo = process.env.PGFENCE_EXPLORE_SAVE;

const summary = (r: RoundResult) =>
  `seed ${r.seed}: ${r.history.ops.length} calls, ${r.history.holds.length} grants, ${r.history.acts.length} acts, ` +
  `${r.history.writeLog.length} fenced writes applied, faults ${JSON.stringify(Object.fromEntries(Object.entries(r.counts).filter(([k]) => k.startsWith('fault:'))))}, ` +
  `${r.violations.length} violations`;

describe('exploration', () => {
  it(`keeps every promise under random operations and faults (first seed ${firstSeed})`, { timeout: totalMs + 10 * 60_000 }, async () => {
    // Restarts need a server of the round's own; without one (not root, no binaries) the rounds run without them.
    const unavailable = privateClusterUnavailable();
    if (unavailable && requireTopology) throw new Error(`a private cluster is required for the restart fault: ${unavailable}`);
    const clusterStarted = Date.now();
    const cluster: PrivateCluster | null = unavailable ? null : await startPrivateCluster({ settings: { max_connections: 200 } });
    console.log(`[explore] ${cluster ? `private cluster started in ${Date.now() - clusterStarted} ms` : `no private cluster (${unavailable}): no restarts`}`);
    const serverUrl = cluster?.url ?? inject('databaseUrl');
    const failures: string[] = [];
    try {
      const started = Date.now();
      for (let round = 0; round === 0 || Date.now() - started < totalMs - 10_000; round++) {
        const seed = (firstSeed + round) | 0;
        console.log(`[explore] round ${round + 1}, seed ${seed} (replay: npm run test:explore -- --seed ${seed} --minutes 1)`);
        const durationMs = Math.min(minutes > 0 ? ROUND_MS : SHORT_ROUND_MS, Math.max(10_000, totalMs - (Date.now() - started)));
        const result = await exploreRound({ seed, durationMs, serverUrl, cluster, log: (line) => console.log(`[explore] ${line}`) });
        console.log(`[explore] ${summary(result)}`);
        if (saveTo) writeFileSync(join(saveTo, `explore-${seed}.json`), stringifyHistory(result.history));
        for (const v of result.violations) failures.push(`seed ${seed}: ${v.type}: ${v.message}`);
      }
    } finally {
      await cluster?.stop();
    }
    expect(failures).toEqual([]);
  });
});
