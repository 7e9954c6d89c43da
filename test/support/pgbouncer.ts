import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { chownSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sleep, within } from '../../src/core/signals.js';
import { freePort } from './server.js';

/** A PgBouncer of the test's own on a loopback port, in front of the test server. */
export interface Bouncer {
  /** The same database as `serverUrl`, through the pooler. */
  url(serverUrl: string): string;
  stop(): Promise<void>;
}

/** Why PgBouncer cannot be started here, or null. */
export function pgbouncerUnavailable(): string | null {
  try {
    execFileSync('pgbouncer', ['--version'], { stdio: 'ignore' });
  } catch {
    return 'pgbouncer is not installed (Debian package pgbouncer)';
  }
  return null;
}

export async function startPgBouncer(
  serverUrl: string,
  mode: 'transaction' | 'session' | 'statement',
  opts: { maxClientConn?: number; defaultPoolSize?: number } = {},
): Promise<Bouncer> {
  const server = new URL(serverUrl);
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'pgfence-pgbouncer-'));
  const user = decodeURIComponent(server.username || 'postgres');
  const password = decodeURIComponent(server.password);
  writeFileSync(join(dir, 'users.txt'), `"${user}" "${password}"\n`);
  writeFileSync(
    join(dir, 'pgbouncer.ini'),
    [
      '[databases]',
      `* = host=${server.hostname} port=${server.port || 5432}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      `unix_socket_dir =`,
      'auth_type = trust',
      `auth_file = ${join(dir, 'users.txt')}`,
      `pool_mode = ${mode}`,
      `max_client_conn = ${opts.maxClientConn ?? 500}`,
      `default_pool_size = ${opts.defaultPoolSize ?? 20}`,
      'ignore_startup_parameters = extra_float_digits,options',
      `logfile = ${join(dir, 'pgbouncer.log')}`,
      `pidfile = ${join(dir, 'pgbouncer.pid')}`,
      '',
    ].join('\n'),
  );
  // PgBouncer refuses to run as root: it drops to the postgres user, who must read its files.
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    const id = execFileSync('id', ['postgres'], { encoding: 'utf8' });
    const uid = Number(/uid=(\d+)/.exec(id)![1]);
    const gid = Number(/gid=(\d+)/.exec(id)![1]);
    for (const f of ['', 'users.txt', 'pgbouncer.ini']) chownSync(join(dir, f), uid, gid);
  }
  const proc: ChildProcess = spawn('pgbouncer', [...(asRoot ? ['-u', 'postgres'] : []), join(dir, 'pgbouncer.ini')], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  proc.stderr!.on('data', (d) => (stderr += d));
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  const stop = async () => {
    if (proc.exitCode === null) {
      proc.kill('SIGTERM');
      await within(exited, 3000);
      if (proc.exitCode === null) proc.kill('SIGKILL');
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 15_000;
  while (!(await listening(port))) {
    if (proc.exitCode !== null || Date.now() > deadline) {
      await stop();
      throw new Error(`pgbouncer did not start: ${stderr}`);
    }
    await sleep(50);
  }
  return {
    url: (url) => {
      const u = new URL(url);
      u.hostname = '127.0.0.1';
      u.port = String(port);
      return u.toString();
    },
    stop,
  };
}

function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(port, '127.0.0.1');
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}
