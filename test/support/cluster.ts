import { execFile, execFileSync } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from './server.js';

const run = promisify(execFile);

/**
 * A PostgreSQL cluster of a test's own (system binaries, run as the postgres user), for settings the
 * shared test server must not get: a tiny lock table, a listener on a namespace's veth address.
 */
export interface PrivateCluster {
  port: number;
  /** postgres://postgres@127.0.0.1:port/postgres */
  url: string;
  /** Stops the server (`immediate`: as a crash would, no checkpoint) and starts it again on the same data and port. */
  restart(mode?: 'fast' | 'immediate'): Promise<void>;
  stop(): Promise<void>;
}

/** Why a private cluster cannot be started here, or null when it can. */
export function privateClusterUnavailable(): string | null {
  if (process.platform !== 'linux') return 'not Linux';
  if (process.getuid?.() !== 0) return 'not root (the cluster runs as the postgres user)';
  if (!postgresBinDir()) return 'no PostgreSQL server binaries under /usr/lib/postgresql';
  try {
    execFileSync('id', ['postgres'], { stdio: 'ignore' });
  } catch {
    return 'no postgres user';
  }
  return null;
}

function postgresBinDir(): string | null {
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return null;
  const versions = readdirSync(root)
    .filter((v) => existsSync(join(root, v, 'bin', 'initdb')))
    .sort((a, b) => Number(a) - Number(b));
  return versions.length ? join(root, versions[versions.length - 1]!, 'bin') : null;
}

export async function startPrivateCluster(opts: {
  /** Addresses to listen on besides 127.0.0.1. */
  listen?: string[];
  /** Extra pg_hba.conf lines (trust). */
  hba?: string[];
  settings?: Record<string, string | number>;
}): Promise<PrivateCluster> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'pgfence-cluster-'));
  const { uid, gid } = postgresUser();
  chownSync(dir, uid, gid);
  const bin = postgresBinDir()!;
  const asPostgres = (cmd: string, args: string[]) => run('runuser', ['-u', 'postgres', '--', join(bin, cmd), ...args]);
  const data = join(dir, 'data');
  let started = false;
  let startOptions = '';
  const restart = async (mode: 'fast' | 'immediate' = 'fast') => {
    await asPostgres('pg_ctl', ['-D', data, '-m', mode, '-w', 'stop']);
    await asPostgres('pg_ctl', ['-D', data, '-l', join(dir, 'log'), '-w', '-t', '60', '-o', startOptions, 'start']);
  };
  const stop = async () => {
    if (started) await asPostgres('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']).catch(() => {});
    started = false;
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await asPostgres('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '--no-sync', '-E', 'UTF8']);
    writeFileSync(join(data, 'pg_hba.conf'), ['local all all trust', 'host all all 127.0.0.1/32 trust', ...(opts.hba ?? [])].join('\n') + '\n');
    const settings: Record<string, string | number> = {
      listen_addresses: [...(opts.listen ?? []), '127.0.0.1'].join(','),
      port,
      unix_socket_directories: dir,
      max_connections: 40,
      fsync: 'off',
      shared_buffers: '16MB',
      ...opts.settings,
    };
    const o = Object.entries(settings)
      .map(([k, v]) => `-c ${k}=${v}`)
      .join(' ');
    started = true;
    startOptions = o;
    await asPostgres('pg_ctl', ['-D', data, '-l', join(dir, 'log'), '-w', '-t', '60', '-o', o, 'start']);
  } catch (err) {
    await stop();
    throw err;
  }
  return { port, url: `postgres://postgres@127.0.0.1:${port}/postgres`, restart, stop };
}

function postgresUser(): { uid: number; gid: number } {
  const out = execFileSync('id', ['postgres'], { encoding: 'utf8' });
  return { uid: Number(/uid=(\d+)/.exec(out)![1]), gid: Number(/gid=(\d+)/.exec(out)![1]) };
}
