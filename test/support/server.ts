import { withDeadline } from '../../src/core/signals.js';
import { freePort, startEmbeddedPostgres } from '../../src/embedded/embedded-postgres.js';

/** A PostgreSQL server for tests: its URL (to a maintenance database) and how to stop it. */
export interface TestServer {
  url: string;
  source: 'DATABASE_URL' | 'testcontainers' | 'embedded-postgres';
  stop(): Promise<void>;
}

/**
 * DATABASE_URL when set; else a container through testcontainers when a container runtime answers;
 * else embedded-postgres in a temporary directory (as root it runs the server as the postgres user).
 */
export async function startTestServer(log: (msg: string) => void = () => {}): Promise<TestServer> {
  if (process.env.DATABASE_URL) {
    return { url: process.env.DATABASE_URL, source: 'DATABASE_URL', stop: async () => {} };
  }
  const container = await tryTestcontainers(log);
  if (container) return container;
  log('no DATABASE_URL and no container runtime: starting embedded-postgres');
  return startEmbedded();
}

async function tryTestcontainers(log: (msg: string) => void): Promise<TestServer | null> {
  try {
    const { getContainerRuntimeClient } = await import('testcontainers');
    await withTimeout(getContainerRuntimeClient(), 5000);
  } catch {
    return null;
  }
  log('starting PostgreSQL through testcontainers');
  const { PostgreSqlContainer } = await import('@testcontainers/postgresql');
  const container = await new PostgreSqlContainer('postgres:16-alpine').start();
  return {
    url: container.getConnectionUri(),
    source: 'testcontainers',
    stop: async () => {
      await container.stop();
    },
  };
}

/**
 * A private embedded-postgres server in a fresh temporary directory, on a free port (the demo's
 * server, durable, with room for parallel test files).
 */
export async function startEmbedded(): Promise<TestServer & { dir: string; port: number; restart(): Promise<void> }> {
  const server = await startEmbeddedPostgres({ dirPrefix: 'pgfence-pg-', durable: true, maxConnections: 200 });
  return { ...server, source: 'embedded-postgres' };
}

export { freePort };

/** `p`, or a rejection once `ms` pass (a hang guard: tests assert outcomes, not timing). */
export function withTimeout<T>(p: Promise<T>, ms: number, what = 'the promise'): Promise<T> {
  return withDeadline(p, ms, () => new Error(`timeout: ${what}`));
}
