import { execFile, execFileSync } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';
import { promisify } from 'node:util';
import { privateClusterUnavailable, startPrivateCluster } from './cluster.js';

const run = promisify(execFile);

/**
 * A network namespace joined to the host by a veth pair on a private /30 that exists only between the
 * two ends (10.231.N.0/30: host .1, namespace .2), and a PostgreSQL cluster of the test's own that
 * listens on the host end (and on 127.0.0.1 for lockers outside). `cut()` takes the namespace's end
 * down: a partition, packets vanish without an error reaching the server.
 */
export interface PartitionLab {
  namespace: string;
  /** The server's URL as seen from inside the namespace (over the veth). */
  innerUrl: string;
  /** The same server from the host (loopback), unaffected by the cut. */
  outerUrl: string;
  /** The namespace's address, as the server sees its clients (pg_stat_activity.client_addr). */
  innerAddress: string;
  /** argv prefix that runs a command inside the namespace. */
  exec(argv: string[]): string[];
  cut(): Promise<void>;
  restore(): Promise<void>;
  destroy(): Promise<void>;
}

/** Why namespaces cannot be used here, or null when they can. */
export function netnsUnavailable(): string | null {
  if (process.platform !== 'linux') return 'not Linux';
  if (process.getuid?.() !== 0) return 'not root';
  try {
    execFileSync('ip', ['-V'], { stdio: 'ignore' });
  } catch {
    return 'iproute2 (ip) is not installed';
  }
  const cluster = privateClusterUnavailable();
  if (cluster) return cluster;
  const probe = `pgfprobe${randomBytes(3).toString('hex')}`;
  try {
    execFileSync('ip', ['netns', 'add', probe], { stdio: 'ignore' });
    execFileSync('ip', ['netns', 'del', probe], { stdio: 'ignore' });
  } catch {
    return 'cannot create network namespaces (ip netns add failed)';
  }
  return null;
}

export async function createPartitionLab(): Promise<PartitionLab> {
  const tag = randomBytes(3).toString('hex');
  const namespace = `pgfns${tag}`;
  const hostIf = `pgfh${tag}`;
  const innerIf = `pgfn${tag}`;
  const used = execFileSync('ip', ['-4', '-o', 'addr'], { encoding: 'utf8' });
  let subnet = randomInt(0, 256);
  for (let i = 0; i < 256 && used.includes(`10.231.${subnet}.`); i++) subnet = (subnet + 1) % 256;
  const hostAddress = `10.231.${subnet}.1`;
  const innerAddress = `10.231.${subnet}.2`;
  const cleanups: (() => Promise<unknown>)[] = [];
  const destroy = async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
  };
  try {
    await run('ip', ['netns', 'add', namespace]);
    cleanups.push(() => run('ip', ['netns', 'del', namespace])); // takes the veth pair with it
    await run('ip', ['link', 'add', hostIf, 'type', 'veth', 'peer', 'name', innerIf]);
    cleanups.push(() => run('ip', ['link', 'del', hostIf]));
    await run('ip', ['link', 'set', innerIf, 'netns', namespace]);
    await run('ip', ['addr', 'add', `${hostAddress}/30`, 'dev', hostIf]);
    await run('ip', ['link', 'set', hostIf, 'up']);
    await run('ip', ['netns', 'exec', namespace, 'ip', 'addr', 'add', `${innerAddress}/30`, 'dev', innerIf]);
    await run('ip', ['netns', 'exec', namespace, 'ip', 'link', 'set', innerIf, 'up']);
    await run('ip', ['netns', 'exec', namespace, 'ip', 'link', 'set', 'lo', 'up']);

    const cluster = await startPrivateCluster({ listen: [hostAddress], hba: [`host all all ${innerAddress}/32 trust`] });
    cleanups.push(() => cluster.stop());
    const port = cluster.port;
    return {
      namespace,
      innerAddress,
      innerUrl: `postgres://postgres@${hostAddress}:${port}/postgres`,
      outerUrl: `postgres://postgres@127.0.0.1:${port}/postgres`,
      exec: (argv) => ['ip', 'netns', 'exec', namespace, ...argv],
      cut: async () => void (await run('ip', ['netns', 'exec', namespace, 'ip', 'link', 'set', innerIf, 'down'])),
      restore: async () => void (await run('ip', ['netns', 'exec', namespace, 'ip', 'link', 'set', innerIf, 'up'])),
      destroy,
    };
  } catch (err) {
    await destroy();
    throw err;
  }
}

