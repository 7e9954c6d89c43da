/**
 * A primary and a streaming standby of the machine's own PostgreSQL binaries (Debian's
 * /usr/lib/postgresql/N/bin), in temporary directories on free loopback ports, for failover tests:
 * crash the primary (`-m immediate`), promote the standby. As root the servers run as `postgres`.
 * `replicationBinaries()` is null where the machine has no such binaries (the tests then skip).
 */
import { execFile } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { appendFile, chmod, chown, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { sleep } from '../../src/core/signals.js';
import { freePort } from './server.js';

const run = promisify(execFile);
const asRoot = process.getuid?.() === 0;

/** The newest installed server's bin directory with initdb, pg_ctl and pg_basebackup, or null. */
export function replicationBinaries(): string | null {
  const base = '/usr/lib/postgresql';
  if (!existsSync(base)) return null;
  const versions = readdirSync(base).filter((v) => /^\d+$/.test(v)).sort((a, b) => Number(b) - Number(a));
  for (const v of versions) {
    const bin = join(base, v, 'bin');
    if (['initdb', 'pg_ctl', 'pg_basebackup', 'postgres'].every((x) => existsSync(join(bin, x)))) return bin;
  }
  return null;
}

async function postgresIds(): Promise<{ uid: number; gid: number }> {
  const { stdout } = await run('id', ['postgres']);
  const uid = Number(/uid=(\d+)/.exec(stdout)![1]);
  const gid = Number(/gid=(\d+)/.exec(stdout)![1]);
  return { uid, gid };
}

export interface ReplicaNode {
  port: number;
  dir: string;
  url: string;
  /** pg_ctl with these arguments (-D is added). */
  ctl(...args: string[]): Promise<void>;
}

export interface ReplicaPair {
  primary: ReplicaNode;
  standby: ReplicaNode;
  /** Waits until the standby has replayed everything the primary has written so far. */
  caughtUp(): Promise<void>;
  /** Stops both servers (immediately) and removes their directories. */
  destroy(): Promise<void>;
}

/** Creates a primary, a database `dbname` on it, and a standby streaming from it (pg_basebackup -R). */
export async function startReplicaPair(bin: string, label: string): Promise<ReplicaPair> {
  const root = await mkdtemp(join(tmpdir(), `pgfence-repl-${label}-`));
  const ids = asRoot ? await postgresIds() : null;
  if (ids) await chown(root, ids.uid, ids.gid);
  await chmod(root, 0o700);
  const exec = async (tool: string, args: string[]) => {
    const [cmd, argv] = ids ? ['runuser', ['-u', 'postgres', '--', join(bin, tool), ...args]] : [join(bin, tool), args];
    try {
      await run(cmd, argv, { cwd: root, timeout: 60_000 });
    } catch (e) {
      const err = e as { stderr?: string; message: string };
      throw new Error(`${tool} ${args.join(' ')} failed: ${err.stderr ?? err.message}`);
    }
  };
  const node = (name: string, port: number): ReplicaNode => {
    const dir = join(root, name);
    return {
      port,
      dir,
      url: `postgresql://postgres@127.0.0.1:${port}/pgfence_ha`,
      ctl: (...args) => exec('pg_ctl', ['-D', dir, '-l', join(root, `${name}.log`), ...args]),
    };
  };
  const primary = node('primary', await freePort());
  const standby = node('standby', await freePort());
  const destroy = async () => {
    for (const n of [primary, standby]) await n.ctl('stop', '-m', 'immediate').catch(() => {});
    await rm(root, { recursive: true, force: true });
  };
  try {
    await exec('initdb', ['-D', primary.dir, '-A', 'trust', '-U', 'postgres', '--no-sync', '--locale=C', '--encoding=UTF8']);
    await appendFile(
      join(primary.dir, 'postgresql.conf'),
      [
        `port = ${primary.port}`,
        "listen_addresses = '127.0.0.1'",
        `unix_socket_directories = '${root}'`,
        'wal_level = replica',
        'max_wal_senders = 5',
        'hot_standby = on',
        'max_connections = 60',
        'shared_buffers = 16MB',
        'fsync = off', // the tests crash the server process, never the machine
        '',
      ].join('\n'),
    );
    await primary.ctl('-w', 'start');
    const admin = new pg.Client({ connectionString: `postgresql://postgres@127.0.0.1:${primary.port}/postgres` });
    await admin.connect();
    await admin.query('CREATE DATABASE pgfence_ha');
    await admin.end();
    await exec('pg_basebackup', ['-h', '127.0.0.1', '-p', String(primary.port), '-U', 'postgres', '-D', standby.dir, '-R', '-X', 'stream', '-c', 'fast']);
    await appendFile(join(standby.dir, 'postgresql.conf'), `port = ${standby.port}\n`);
    await standby.ctl('-w', 'start');
  } catch (e) {
    await destroy();
    throw e;
  }
  const caughtUp = async () => {
    const p = new pg.Client({ connectionString: primary.url });
    const s = new pg.Client({ connectionString: standby.url });
    await p.connect();
    await s.connect();
    try {
      const { rows } = await p.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn');
      for (let i = 0; i < 600; i++) {
        const r = await s.query<{ ok: boolean }>('SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn AS ok', [rows[0]!.lsn]);
        if (r.rows[0]!.ok) return;
        await sleep(50);
      }
      throw new Error('the standby did not catch up within 30 s');
    } finally {
      await p.end();
      await s.end();
    }
  };
  return { primary, standby, caughtUp, destroy };
}

