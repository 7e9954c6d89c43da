import pg from 'pg';

export type Pinning = 'direct' | 'session-pooled' | 'transaction-pooled';

const backendPidSql = 'SELECT pg_backend_pid() AS pid';

async function backendPid(client: pg.ClientBase): Promise<number> {
  return (await client.query<{ pid: number }>(backendPidSql)).rows[0]!.pid;
}

/**
 * Does this connection keep one server backend for its lifetime? PostgreSQL reports its backend's
 * pid when a connection starts; a proxy (PgBouncer, ...) reports a key of its own. Behind a proxy,
 * a second connection asks for its backend between two statements of the first: a pooler that
 * shares backends hands it the one the first just used (PgBouncer reuses the last idle server
 * first), or moves the first to another. A session-mode pool does neither, and is fine.
 */
export async function detectPinning(client: pg.ClientBase, openOther: () => Promise<pg.Client>): Promise<Pinning> {
  const reported = (client as { processID?: number | null }).processID ?? null;
  const first = await backendPid(client);
  if (reported === first) return 'direct';
  const other = await openOther();
  try {
    for (let round = 0; round < 3; round++) {
      const theirs = await backendPid(other);
      const again = await backendPid(client);
      if (theirs === first || again !== first) return 'transaction-pooled';
    }
    return 'session-pooled';
  } finally {
    await other.end().catch(() => {}); // the detection's own second connection: nothing of it is kept
  }
}

/** A one-off client with a pool's own connection settings (for the detection's second connection). */
export async function clientLike(pool: pg.Pool, connectTimeoutMs: number): Promise<pg.Client> {
  const options = (pool as unknown as { options?: pg.ClientConfig }).options ?? {};
  const client = new pg.Client({ ...options, connectionTimeoutMillis: connectTimeoutMs });
  client.on('error', () => {}); // it lives for three statements; an error then fails them
  await client.connect();
  return client;
}
