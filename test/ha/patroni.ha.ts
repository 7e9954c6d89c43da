/**
 * The Patroni suite (`npm run test:ha`): etcd and two Patroni-managed PostgreSQL nodes on loopback
 * ports (Debian's patroni, etcd-server and PostgreSQL packages; .ci/run installs them). Workers take
 * leases and fenced locks through a multi-host URL and write through fencedUpdate while the test
 * kills the leader node (SIGKILL postgres, then Patroni) and Patroni fails over. Afterwards: no stale
 * write was applied, the fenced counters equal the applied writes, tokens strictly increase, every
 * worker recovered, and the unfenced control rows show the lost updates that fencing prevented.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chown, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate } from '../../src/migrate/index.js';
import { fencingColumnSql } from '../../src/index.js';
import { replicationBinaries } from '../support/replication.js';
import { freePort } from '../support/server.js';

const bin = replicationBinaries();
const patroni = ['/usr/bin/patroni', '/usr/bin/etcd'].every(existsSync) ? '/usr/bin/patroni' : null;
const runnable = bin !== null && patroni !== null;
if (!runnable) console.warn('*** Patroni suite SKIPPED: needs patroni, etcd-server and PostgreSQL (apt-get install patroni etcd-server etcd-client) ***');

const asRoot = process.getuid?.() === 0;
const ids = asRoot ? { uid: Number(execFileSync('id', ['-u', 'postgres']).toString()), gid: Number(execFileSync('id', ['-g', 'postgres']).toString()) } : {};
const workerScript = fileURLToPath(new URL('./worker.mjs', import.meta.url));
const children: ChildProcess[] = [];
let root = '';

interface Node {
  name: string;
  pgPort: number;
  restPort: number;
  dataDir: string;
  patroni: ChildProcess;
}
const nodes: Node[] = [];

function start(cmd: string, args: string[], log: string): ChildProcess {
  const child = spawn(cmd, args, { ...ids, cwd: root, env: { ...process.env, HOME: root }, stdio: ['ignore', 'pipe', 'pipe'], detached: false });
  const chunks: Buffer[] = [];
  child.stdout!.on('data', (b: Buffer) => chunks.push(b));
  child.stderr!.on('data', (b: Buffer) => chunks.push(b));
  child.on('exit', () => void writeFile(join(root, `${log}.log`), Buffer.concat(chunks)).catch(() => {}));
  children.push(child);
  return child;
}

async function until<T>(what: string, f: () => Promise<T | null | undefined | false>, timeoutMs = 90_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await f().catch(() => null);
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timeout: ${what}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

const rest = async (node: Node, path: string) => (await fetch(`http://127.0.0.1:${node.restPort}${path}`)).status;
const leader = () => until('a Patroni leader', async () => {
  for (const n of nodes) if (n.patroni.exitCode === null && (await rest(n, '/primary')) === 200) return n;
  return null;
});

async function query<R extends pg.QueryResultRow>(url: string, text: string): Promise<R[]> {
  const c = new pg.Client({ connectionString: url });
  c.on('error', () => {});
  await c.connect();
  try {
    return (await c.query<R>(text)).rows;
  } finally {
    await c.end();
  }
}

let url = '';

beforeAll(async () => {
  if (!runnable) return;
  root = await mkdtemp(join(tmpdir(), 'pgfence-patroni-'));
  if (asRoot) await chown(root, ids.uid!, ids.gid!);
  const [client, peer] = [await freePort(), await freePort()];
  start('/usr/bin/etcd', [
    '--name', 'e1', '--data-dir', join(root, 'etcd'),
    '--listen-client-urls', `http://127.0.0.1:${client}`, '--advertise-client-urls', `http://127.0.0.1:${client}`,
    '--listen-peer-urls', `http://127.0.0.1:${peer}`, '--initial-advertise-peer-urls', `http://127.0.0.1:${peer}`,
    '--initial-cluster', `e1=http://127.0.0.1:${peer}`,
  ], 'etcd');
  await until('etcd', async () => (await fetch(`http://127.0.0.1:${client}/health`)).ok);
  const scope = `pgfence-${process.pid}`;
  for (const name of ['node1', 'node2']) {
    const [pgPort, restPort] = [await freePort(), await freePort()];
    const dataDir = join(root, name);
    const config = {
      scope,
      name,
      restapi: { listen: `127.0.0.1:${restPort}`, connect_address: `127.0.0.1:${restPort}` },
      etcd3: { hosts: `127.0.0.1:${client}` },
      bootstrap: {
        dcs: {
          ttl: 20, loop_wait: 1, retry_timeout: 5, maximum_lag_on_failover: 1_073_741_824,
          // Synchronous: a failover loses no acknowledged commit, so applied writes can be counted.
          synchronous_mode: true,
          postgresql: { use_pg_rewind: false, parameters: { max_connections: 100, wal_keep_size: '128MB', fsync: 'off' } },
        },
        initdb: [{ encoding: 'UTF8' }, { locale: 'C' }],
      },
      postgresql: {
        listen: `127.0.0.1:${pgPort}`,
        connect_address: `127.0.0.1:${pgPort}`,
        data_dir: dataDir,
        bin_dir: bin,
        pgpass: join(root, `${name}.pgpass`),
        authentication: { replication: { username: 'postgres', password: 'x' }, superuser: { username: 'postgres', password: 'x' } },
        parameters: { unix_socket_directories: root },
        pg_hba: ['local all all trust', 'host all all 127.0.0.1/32 trust', 'host replication all 127.0.0.1/32 trust'],
      },
    };
    const file = join(root, `${name}.yml`);
    await writeFile(file, JSON.stringify(config)); // JSON is YAML
    nodes.push({ name, pgPort, restPort, dataDir, patroni: start(patroni!, [file], name) });
    if (name === 'node1') await leader(); // the first node bootstraps the cluster
  }
  url = `postgresql://postgres@${nodes.map((n) => `127.0.0.1:${n.pgPort}`).join(',')}/postgres?target_session_attrs=read-write`;
  await until('a streaming replica', async () => (await rest(nodes[1]!, '/replica')) === 200);
  await migrate({ connectionString: url });
  const primary = `postgresql://postgres@127.0.0.1:${(await leader()).pgPort}/postgres`;
  // Patroni turns synchronous replication on once the replica streams: wait for it.
  await until('a synchronous standby', async () =>
    (await query<{ n: number }>(primary, `SELECT count(*)::int AS n FROM pg_stat_replication WHERE sync_state = 'sync'`))[0]!.n > 0);
  await query(primary, `
    CREATE TABLE fenced (id int PRIMARY KEY, value int NOT NULL);
    CREATE TABLE control (id int PRIMARY KEY, value int NOT NULL, writes int NOT NULL DEFAULT 0);
    CREATE TABLE applied (seq bigserial PRIMARY KEY, id int NOT NULL, token bigint NOT NULL, value int NOT NULL);
    INSERT INTO fenced VALUES (1, 0), (2, 0);
    INSERT INTO control VALUES (1, 0), (2, 0);
    ${fencingColumnSql('fenced', { enforce: true })}
    CREATE FUNCTION note_applied() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN INSERT INTO applied (id, token, value) VALUES (NEW.id, NEW.fencing_token, NEW.value); RETURN NEW; END $$;
    CREATE TRIGGER note_applied AFTER UPDATE OF value ON fenced FOR EACH ROW EXECUTE FUNCTION note_applied();`);
}, 180_000);

afterAll(async () => {
  const exits = children.filter((c) => c.exitCode === null && c.signalCode === null).map((c) => new Promise((r) => c.once('exit', r)));
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
  await Promise.all(exits);
  for (const n of nodes) {
    const pid = await readFile(join(n.dataDir, 'postmaster.pid'), 'utf8').then((t) => Number(t.split('\n')[0]), () => 0);
    if (pid) try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ }
  }
  if (root && !process.env.PGFENCE_KEEP_HA) await rm(root, { recursive: true, force: true, maxRetries: 10, retryDelay: 200 });
});

interface Report { id: string; kind: 'lease' | 'lock'; token?: string; applied?: boolean; ambiguous?: boolean; error?: string; at: number }

describe.skipIf(!runnable)('Patroni failover', () => {
  it('no stale write is applied, fenced counters equal the applied writes, tokens increase, every worker recovers', async () => {
    const reports: Report[] = [];
    const workers = ['w1', 'w2', 'w3', 'w4'].map((id) => {
      const child = spawn(process.execPath, [workerScript, url, id], { stdio: ['pipe', 'pipe', 'inherit'] });
      children.push(child);
      createInterface({ input: child.stdout! }).on('line', (line) => reports.push(JSON.parse(line) as Report));
      return child;
    });
    const writes = () => reports.filter((r) => r.applied !== undefined);
    // Before the failover: some writes, at least one stale write refused (a paused holder's), and the unfenced control
    // rows already short of their writes. One refusal alone need not show there: when the newer holder paused too and
    // had not written yet, the stale control write overwrote nothing. Lost updates only grow, and synchronous
    // replication keeps them through the failover.
    const lostOnLeader = async () => {
      const at = `postgresql://postgres@127.0.0.1:${(await leader()).pgPort}/postgres`;
      return (await query<{ lost: number }>(at, 'SELECT sum(writes - value)::int AS lost FROM control'))[0]!.lost;
    };
    await until('writes before the failover, and a lost update on the control rows', async () =>
      writes().length >= 20 && writes().some((r) => r.applied === false) && (await lostOnLeader()) > 0, 90_000);

    // Kill the leader node: postgres first (SIGKILL, no shutdown), then its Patroni.
    const old = await leader();
    const pid = Number((await readFile(join(old.dataDir, 'postmaster.pid'), 'utf8')).split('\n')[0]);
    process.kill(pid, 'SIGKILL');
    old.patroni.kill('SIGKILL');
    const killedAt = Date.now();
    const promoted = await until('Patroni fails over', async () => {
      const n = nodes.find((x) => x !== old)!;
      return (await rest(n, '/primary')) === 200 ? n : null;
    });
    expect(promoted).not.toBe(old);
    // Every worker writes again (applied) after the failover.
    await until('every worker recovers', async () =>
      workers.every((_, i) => reports.some((r) => r.id === `w${i + 1}` && r.applied === true && r.at > killedAt)), 90_000);
    for (const w of workers) w.stdin!.end();
    await Promise.all(workers.map((w) => new Promise((r) => (w.exitCode !== null ? r(null) : w.once('exit', r)))));

    const newUrl = `postgresql://postgres@127.0.0.1:${promoted.pgPort}/postgres`;
    const applied = await query<{ id: number; token: string; value: number }>(newUrl, 'SELECT id, token::text, value FROM applied ORDER BY seq');
    const fenced = await query<{ id: number; value: number }>(newUrl, 'SELECT id, value FROM fenced ORDER BY id');
    const control = await query<{ id: number; value: number; writes: number }>(newUrl, 'SELECT id, value, writes FROM control ORDER BY id');
    const timeline = (await query<{ tl: number }>(newUrl, `SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int AS tl`))[0]!.tl;
    expect(timeline).toBeGreaterThan(1);
    for (const row of [1, 2]) {
      const mine = applied.filter((a) => a.id === row).map((a) => ({ token: BigInt(a.token), value: a.value }));
      // No stale write: each applied write carries a greater token than the one before (one write per grant).
      expect(mine.every((a, i) => i === 0 || a.token > mine[i - 1]!.token), `row ${row} tokens`).toBe(true);
      // The fenced counter equals the applied writes: none lost, none doubled.
      expect(fenced.find((f) => f.id === row)!.value, `row ${row}: counter vs applied`).toBe(mine.length);
      expect(mine.map((a) => a.value)).toEqual(mine.map((_, i) => i + 1));
      // Workers saw the same number applied (synchronous replication: nothing acknowledged was lost),
      // give or take the writes in flight when the leader died (committed, but the answer was lost).
      const kind = row === 1 ? 'lease' : 'lock';
      const reported = writes().filter((r) => r.applied && r.kind === kind).length;
      const inFlight = reports.filter((r) => r.ambiguous && r.kind === kind).length;
      expect(mine.length, `row ${row}: applied vs reported`).toBeGreaterThanOrEqual(reported);
      expect(mine.length, `row ${row}: applied vs reported + in flight`).toBeLessThanOrEqual(reported + inFlight);
      // Tokens issued after the failover exceed every token issued before it.
      const before = mine.filter((a) => a.token < 1n << 48n);
      const after = mine.filter((a) => a.token >= BigInt(timeline - 1) << 48n);
      expect(before.length).toBeGreaterThan(0);
      expect(after.length).toBeGreaterThan(0);
    }
    // Stale writes were refused, and the unfenced control rows lost updates (fencing kept them off the fenced rows).
    const refused = writes().filter((r) => r.applied === false).length;
    const lost = control.reduce((n, c) => n + c.writes - c.value, 0);
    console.log(`[patroni] failover in ${((Date.now() - killedAt) / 1000).toFixed(0)} s (to recovery); applied ${applied.length}, refused ${refused}, control lost ${lost} updates`);
    expect(refused).toBeGreaterThan(0);
    expect(lost).toBeGreaterThan(0);
  }, 240_000);
});
