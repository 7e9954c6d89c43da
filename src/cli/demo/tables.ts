import pg from 'pg';
import { fencingColumnSql } from '../../fencing/index.js';

/** The demo's own schema: dropped and recreated by every run, so it never touches anyone's tables. */
export const SCHEMA = 'pgfence_demo';
export const FENCED_TABLE = `${SCHEMA}.fenced_counter`;
export const CONTROL_TABLE = `${SCHEMA}.control_counter`;
export const ROW_ID = 'counter';

export interface CounterRow {
  value: number;
  lastWriter: string | null;
  writerToken: bigint | null;
  /** The fenced table only. */
  fencingToken?: bigint | null;
}

export async function connect(url: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url, application_name: 'pgfence_demo' });
  client.on('error', () => {}); // the server going away (Ctrl-C) must not crash the demo
  await client.connect();
  return client;
}

/** The two counters, both at 0: one written through fencedUpdate(), one with plain UPDATEs. */
export async function createTables(client: pg.Client): Promise<void> {
  const columns = `id text PRIMARY KEY, value integer NOT NULL, last_writer text, writer_token bigint`;
  await client.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`);
  await client.query(`CREATE SCHEMA ${SCHEMA}`);
  await client.query(`COMMENT ON SCHEMA ${SCHEMA} IS 'tables of pgfence demo: dropped and recreated by every run'`);
  await client.query(`CREATE TABLE ${FENCED_TABLE} (${columns})`);
  await client.query(fencingColumnSql(FENCED_TABLE));
  await client.query(`CREATE TABLE ${CONTROL_TABLE} (${columns})`);
  await client.query(`INSERT INTO ${FENCED_TABLE} (id, value) VALUES ($1, 0)`, [ROW_ID]);
  await client.query(`INSERT INTO ${CONTROL_TABLE} (id, value) VALUES ($1, 0)`, [ROW_ID]);
}

export async function readCounters(client: pg.Client): Promise<{ fenced: CounterRow; control: CounterRow }> {
  const f = await client.query<{ value: number; last_writer: string | null; writer_token: string | null; fencing_token: string | null }>(
    `SELECT value, last_writer, writer_token::text, fencing_token::text FROM ${FENCED_TABLE} WHERE id = $1`,
    [ROW_ID],
  );
  const c = await client.query<{ value: number; last_writer: string | null; writer_token: string | null }>(
    `SELECT value, last_writer, writer_token::text FROM ${CONTROL_TABLE} WHERE id = $1`,
    [ROW_ID],
  );
  const big = (v: string | null | undefined) => (v === null || v === undefined ? null : BigInt(v));
  const fr = f.rows[0]!;
  const cr = c.rows[0]!;
  return {
    fenced: { value: fr.value, lastWriter: fr.last_writer, writerToken: big(fr.writer_token), fencingToken: big(fr.fencing_token) },
    control: { value: cr.value, lastWriter: cr.last_writer, writerToken: big(cr.writer_token) },
  };
}

/** Database clock minus this machine's clock, in ms (measured at the middle of a round trip). */
export async function clockOffsetMs(client: pg.Client): Promise<number> {
  const before = Date.now();
  const { rows } = await client.query<{ now: number }>(`SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS now`);
  const after = Date.now();
  return rows[0]!.now - (before + after) / 2;
}

/** When the database lets anyone else take the lease (pgfence.leases, database clock). */
export async function leaseExpiry(client: pg.Client, key: bigint, token: bigint): Promise<Date | null> {
  const { rows } = await client.query<{ expires_at: Date }>(
    `SELECT expires_at FROM pgfence.leases WHERE key = $1 AND token = $2`,
    [String(key), String(token)],
  );
  return rows[0]?.expires_at ?? null;
}

export async function serverVersion(client: pg.Client): Promise<string> {
  const { rows } = await client.query<{ v: string }>(`SELECT current_setting('server_version') AS v`);
  return rows[0]!.v.split(' ')[0]!;
}
