import pg from 'pg';
import { queryOnce } from './db.js';

/** Where to look: a URL (a connection of its own for the one statement) or a connected client. */
type On = string | pg.ClientBase;
const rowsOf = async <R extends pg.QueryResultRow>(on: On, text: string, values: unknown[]): Promise<R[]> =>
  typeof on === 'string' ? queryOnce<R>(on, text, values) : (await on.query<R>(text, values)).rows;

/**
 * What the server holds, seen from a connection of the test's own: session advisory locks of a bigint
 * key (classid:objid, objsubid 1), and the wait announcements pgfence registers for it (markers: shared
 * locks in the two-int4 key space on the same words, objsubid 2).
 */

/** Session advisory locks of `key` on the server: granted (held) or not (waiting in its queue). */
export async function advisoryLocksOf(on: On, key: bigint, granted = true): Promise<number> {
  const rows = await rowsOf<{ n: number }>(
    on,
    `SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND granted = $2
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND ((classid::int8 << 32) | objid::int8) = $1::int8`,
    [String(key), granted],
  );
  return rows[0]!.n;
}

/** Sessions announcing that they wait for `key` (its markers), on the server. */
export async function markersOf(on: On, key: bigint): Promise<number> {
  const rows = await rowsOf<{ n: number }>(
    on,
    `SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND granted
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND classid = ($1::int8 >> 32)::int4::oid AND objid = ($1::int8 & 4294967295)::oid`,
    [String(key)],
  );
  return rows[0]!.n;
}

/** A live lease of `key` (not released, not expired on the database clock). */
export async function leaseLive(on: On, key: bigint): Promise<boolean> {
  const rows = await rowsOf(on, `SELECT 1 FROM pgfence.leases WHERE key = $1 AND released_at IS NULL AND expires_at > clock_timestamp()`, [String(key)]);
  return rows.length > 0;
}
