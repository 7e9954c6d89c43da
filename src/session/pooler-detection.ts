import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { pinningProbeSql } from './session-sql.js';

export type Pinning = 'direct' | 'session-pooled' | 'transaction-pooled';

interface Probed {
  pid: number;
  seen: string | null;
}

async function probe(client: pg.ClientBase, mark: string): Promise<Probed> {
  return (await client.query<Probed>(pinningProbeSql, [mark])).rows[0]!;
}

/** Detections through one proxy target in this process, chained: one at a time (see detectPinning). */
const detections = new Map<string, Promise<unknown>>();

/**
 * Does this connection keep one server backend for its lifetime? PostgreSQL reports its backend's
 * pid when a connection starts; a proxy (PgBouncer, ...) reports a key of its own. Behind a proxy,
 * a second connection asks for its backend between two statements of the first: a pooler that
 * shares backends hands it the one the first just used (PgBouncer reuses the last idle server
 * first), or moves the first to another. A session-mode pool does neither, and is fine.
 *
 * Detections running at once can hide that from each other: each one's second connection may be handed
 * the server another detection just let go, so every first connection keeps its server. So detections
 * through one target in this process take turns, and each probe marks its session's server: a first
 * connection that finds a mark it did not leave shared its server with someone (another process's
 * detection, say), which only a transaction pooler does.
 */
export async function detectPinning(client: pg.ClientBase, openOther: () => Promise<pg.Client>): Promise<Pinning> {
  const reported = (client as { processID?: number | null }).processID ?? null;
  const mark = `pgfence:${randomUUID()}`;
  const first = await probe(client, `${mark}:0`);
  if (reported === first.pid) return 'direct';
  const target = targetOf(client);
  const turn = (detections.get(target) ?? Promise.resolve()).then(() => probePinning(client, openOther, mark, first.pid));
  const settled = turn.catch(() => {}); // the next turn waits for this one's end, failed or not (its caller hears why)
  detections.set(target, settled);
  void settled.then(() => {
    if (detections.get(target) === settled) detections.delete(target);
  });
  return turn;
}

/** The rounds behind a proxy: another connection's probe, then this one's again (it left `${mark}:0` already). */
async function probePinning(client: pg.ClientBase, openOther: () => Promise<pg.Client>, mark: string, firstPid: number): Promise<Pinning> {
  // Its turn may have come after others' detections: its server must still be its own, with its own mark.
  const again0 = await probe(client, `${mark}:0`);
  if (again0.pid !== firstPid || again0.seen !== `${mark}:0`) return 'transaction-pooled';
  const other = await openOther();
  try {
    for (let round = 1; round <= 3; round++) {
      const theirs = await probe(other, `${mark}:other`);
      const again = await probe(client, `${mark}:${round}`);
      if (theirs.pid === firstPid || again.pid !== firstPid || again.seen !== `${mark}:${round - 1}`) return 'transaction-pooled';
    }
    return 'session-pooled';
  } finally {
    await other.end().catch(() => {}); // the detection's own second connection: nothing of it is kept
  }
}

/** Where a connection goes (host, port, database, user): detections through one proxy take turns. */
function targetOf(client: pg.ClientBase): string {
  const c = client as unknown as { host?: string; port?: number; database?: string; user?: string };
  return `${c.host}:${c.port}/${c.database}/${c.user}`;
}

/** A one-off client with a pool's own connection settings (for the detection's second connection). */
export async function clientLike(pool: pg.Pool, connectTimeoutMs: number): Promise<pg.Client> {
  const options = (pool as unknown as { options?: pg.ClientConfig }).options ?? {};
  // Its statements bounded too: a detection that never ended would hold up every later one through its target.
  const client = new pg.Client({ ...options, connectionTimeoutMillis: connectTimeoutMs, query_timeout: connectTimeoutMs });
  client.on('error', () => {}); // it lives for three statements; an error then fails them
  await client.connect();
  return client;
}
