/**
 * How pgfence runs a statement through Knex: as a Knex raw query on the caller's own Knex instance or
 * transaction (so it goes through Knex's pool, its transaction's connection, its 'query' events), with
 * three corrections Knex would otherwise need from the caller:
 *
 * - Placeholders. pgfence writes `$1, $2, …`; Knex binds `?` (and `??` as an identifier) and turns them
 *   into `$n` itself. The text between placeholders is escaped so that no `?` of pgfence's own is ever
 *   read as a binding (Knex's documented `\?`).
 * - Results. Knex hands a raw query's driver result to the user's `postProcessResponse` (say, a camelCase
 *   mapper), which would rename pgfence's columns (`in_xact`). pgfence's statements run on a view of the
 *   client whose postProcessResponse passes the result through; Knex's Runner calls
 *   `client.postProcessResponse`, the one piece of Knex's internals relied on here.
 * - Errors. Knex prefixes a failed statement's SQL to the driver's message; the prefix is taken off again,
 *   so the error a PgfenceError carries as its cause reads as PostgreSQL wrote it (code, severity kept).
 */
import type { Knex } from 'knex';
import { describeType, InvalidArgumentError } from '../../core/index.js';
import { splitPlaceholders } from '../shared/index.js';

/** A Knex instance or transaction of any table types (a Transaction is a Knex too). */
export type AnyKnex = Knex<any, any>;

/** What node-postgres answers: one result, or one per statement for a multi-statement script. */
export interface DriverResult {
  rows: Record<string, unknown>[];
}

/** The internals of Knex's client that pgfence reads (its own, per instance; a transaction's is a copy). */
export interface KnexClientInternals {
  driverName?: string;
  config: object;
  raw(sql: string, bindings?: readonly unknown[]): Knex.Raw;
  postProcessResponse(result: unknown, queryContext: unknown): unknown;
}

/**
 * The Knex instance or transaction `db`, checked before any I/O: a Knex object (a function with raw()
 * and a client) on the 'pg' client (node-postgres), whose results and errors pgfence reads.
 */
export function knexOf(db: unknown, argument: string, expected: string): AnyKnex {
  const client = (db as { client?: { driverName?: unknown } } | null)?.client;
  if (typeof db !== 'function' || typeof (db as { raw?: unknown }).raw !== 'function' || typeof client !== 'object' || client === null) {
    throw new InvalidArgumentError(argument, `expected ${expected}, got ${describeType(db)}`);
  }
  checkPgClient(client, argument);
  return db as AnyKnex;
}

/** Refuses a Knex client other than 'pg' (MySQL, SQLite, pg-native, ...): pgfence reads node-postgres' results. */
export function checkPgClient(client: { driverName?: unknown }, argument: string): void {
  if (client.driverName !== 'pg') {
    throw new InvalidArgumentError(argument, `pgfence/knex runs on Knex's 'pg' client (node-postgres), got driver ${String(client.driverName)}`);
  }
}

/** Views of clients that leave results as the driver returned them, one per client object. */
const unprocessedClients = new WeakMap<object, KnexClientInternals>();

/** `client` as it is, except that raw results are not post-processed (see the header). */
export function unprocessed(client: KnexClientInternals): KnexClientInternals {
  let view = unprocessedClients.get(client);
  if (!view) {
    view = Object.create(client, { postProcessResponse: { value: (result: unknown) => result } }) as KnexClientInternals;
    unprocessedClients.set(client, view);
  }
  return view;
}

/** A pgfence statement ($n placeholders, values in $n order) as Knex raw SQL with `?` bindings, in order of appearance. */
export function knexStatement(text: string, values: readonly unknown[]): { sql: string; bindings: unknown[] } {
  const { strings, values: bindings } = splitPlaceholders(text, values);
  return { sql: strings.map(escapeQuestionMarks).join('?'), bindings };
}

/**
 * Knex reads `?` as a binding and `\?` as a literal `?` (it removes the backslash). A backslash right
 * before a `?` cannot be written at all (Knex eats it): pgfence's statements have none, and this says so
 * loudly rather than send another statement.
 */
function escapeQuestionMarks(text: string): string {
  if (!text.includes('?')) return text;
  if (text.includes('\\?')) throw new Error('pgfence/knex: a statement has a backslash right before a question mark, which Knex cannot send as written');
  return text.replaceAll('?', '\\?');
}

/**
 * Runs a raw query built on the unprocessed view of its client: the driver's result, or the driver's
 * error with Knex's SQL prefix taken off its message.
 */
export async function runRaw(raw: Knex.Raw): Promise<DriverResult | DriverResult[]> {
  try {
    return (await raw) as DriverResult | DriverResult[];
  } catch (err) {
    throw withoutSqlPrefix(err, raw);
  }
}

/** Runs pgfence's statement ($n placeholders) on `db`'s connection: node-postgres' result. */
export function runStatement(db: AnyKnex, text: string, values: readonly unknown[]): Promise<DriverResult | DriverResult[]> {
  const { sql, bindings } = knexStatement(text, values);
  return runRaw(unprocessed(db.client as KnexClientInternals).raw(sql, bindings));
}

/**
 * Runs a script of pgfence's (no parameters: a `$1` in it is PostgreSQL's, say in a function body) on
 * `db`'s connection: node-postgres sends it as one simple query, with one result per statement.
 */
export function runScript(db: AnyKnex, text: string): Promise<DriverResult | DriverResult[]> {
  return runRaw(unprocessed(db.client as KnexClientInternals).raw(escapeQuestionMarks(text), []));
}

/**
 * Knex rewrites a failed statement's error message to `<the SQL sent> - <the driver's message>`: the
 * driver's own message is put back (PgfenceErrors quote it, and a message repeating the statement hides it).
 */
function withoutSqlPrefix(err: unknown, raw: Knex.Raw): unknown {
  if (!(err instanceof Error) || typeof (err as { severity?: unknown }).severity !== 'string') return err;
  let sent: string;
  try {
    sent = raw.toSQL().toNative().sql;
  } catch {
    return err; // not a statement Knex can compile again: the message stays as Knex wrote it
  }
  const prefix = `${sent} - `;
  if (err.message.startsWith(prefix)) err.message = err.message.slice(prefix.length);
  return err;
}
