/**
 * The builder idiom: the fencing guard and the token added to the caller's own Knex update. Knex has no
 * public API to take a builder apart, so this reads (never changes) the builder's own state, as Knex's
 * compiler does: `_method` (an update?), `_single` (table, schema, update, counter, and what it refuses),
 * `_statements` (the 'where' statements; anything else is refused). It works on clones: setting
 * `_single.update` on one (with the token) and `_method = 'select'` on another (the rows matched).
 */
import type { Knex } from 'knex';
import { describeType, InvalidArgumentError } from '../../core/index.js';
import { optionKeys, optionsObject } from '../../options.js';
import { bareIdentifier, checkToken, countedUpdate, DEFAULT_FENCING_COLUMN, type FencedUpdateResult, fencedUpdateResult, type GuardedCounts, guardedWriteError, quoteColumn, type SqlTag } from '../../fencing/index.js';
import { checkPgClient, type DriverResult, type KnexClientInternals, runRaw, unprocessed } from './raw.js';

/** A guarded Knex update, ready to run: `execute()` reports what it wrote and what it refused, and why. */
export interface FencedUpdateQuery {
  /**
   * Runs the update (one statement, on the builder's own transaction or instance); stale vs missing as
   * fencedUpdate reports them.
   *
   * @example
   * ```ts fragment
   * import { knex } from 'knex';
   * import { fenced } from 'pgfence/knex';
   *
   * const db = knex({ client: 'pg', connection: url });
   * const r = await fenced(db('orders').where({ id: 1 }).update({ status: 'paid' }), token).execute();
   * console.log(r.applied, r.written, r.refused, r.reason);
   * ```
   */
  execute(): Promise<FencedUpdateResult>;
  /**
   * The statement it runs (Knex's `toSQL()`: `sql` with `?` bindings, `toNative()` with `$n`).
   *
   * @example
   * ```ts fragment
   * import { knex } from 'knex';
   * import { fenced } from 'pgfence/knex';
   *
   * const db = knex({ client: 'pg', connection: url });
   * console.log(fenced(db('orders').where({ id: 1 }).update({ status: 'paid' }), token).toSQL().toNative().sql);
   * ```
   */
  toSQL(): Knex.Sql;
}

/** What fenced() reads of a Knex query builder (see the header). */
interface BuilderInternals {
  client: KnexClientInternals & { driverName?: unknown };
  _method?: unknown;
  _single: Record<string, unknown>;
  _statements: { grouping: string }[];
  _connection?: unknown;
  clone(): BuilderInternals & Knex.QueryBuilder;
}

/** The `_single` entries an update of one table may have; any other (returning, updateFrom, limit, ...) is refused. */
const SINGLE_ALLOWED = new Set(['table', 'schema', 'only', 'update', 'counter']);

/**
 * Adds the fencing guard to a Knex update builder (`trx('orders').where(...).update({...})`, in either
 * order, increments included): it writes `token` into the fencing column and applies only where that
 * column is NULL or not newer than `token`; the builder's own `where` is kept whole, in parentheses. The
 * same statement counts the rows that `where` matched, so the result says whether a newer holder had
 * written them ('stale', with `currentToken`) or no row matched ('missing'), as fencedUpdate does.
 *
 * Runs where the builder runs: a builder made from a transaction (`trx('orders')`) runs in it. Refused
 * with InvalidArgumentError (before any I/O): anything but an update, and updates with joins, `with`,
 * `updateFrom`, a subquery as the table, `returning`, order/limit, or that write the fencing column.
 *
 * The statement (Knex compiles the parts, the column through your wrapIdentifier as any of yours):
 * ```text
 * WITH "pgfence updated" AS (update "orders" set "status" = $1, "fencing_token" = $2
 *   where ("id" = $3) and ("fencing_token" is null or "fencing_token" <= $4) returning 1)
 * SELECT (SELECT count(*) FROM "pgfence updated")::int AS written,
 *        (SELECT count(*) FROM (select * from "orders" where "id" = $5) AS "pgfence matched")::int AS matched,
 *        (SELECT max("fencing_token") FROM (select * from "orders" where "id" = $6) AS "pgfence matched")::text AS current
 * ```
 *
 * @example
 * ```ts fragment
 * import { knex } from 'knex';
 * import { fenced, xactLock } from 'pgfence/knex';
 *
 * const db = knex({ client: 'pg', connection: url });
 * await db.transaction(async (trx) => {
 *   const lock = await xactLock(trx, 'order:1', { fencing: true });
 *   const r = await fenced(trx('orders').where({ id: 1 }).update({ status: 'paid' }), lock.token).execute();
 *   if (!r.applied) console.log(r.reason); // 'stale': a newer holder has written; 'missing': no such order
 * });
 * ```
 */
export function fenced(builder: Knex.QueryBuilder<any, any>, token: bigint, opts?: { column?: string }): FencedUpdateQuery {
  const b = updateBuilder(builder);
  checkToken(token);
  const o = optionsObject<{ column?: string }>(opts, 'fenced options', FENCED_OPTION_KEYS);
  const column = bareIdentifier(quoteColumn(o.column ?? DEFAULT_FENCING_COLUMN, 'column'));
  for (const written of ['update', 'counter'] as const) {
    const values = b._single[written] as Record<string, unknown> | undefined;
    if (values && Object.hasOwn(values, column)) {
      throw new InvalidArgumentError('builder', `the ${column} column is written by fenced() itself: leave it out of the update`);
    }
  }
  const client = b.client;
  const wheres = b._statements.filter((s) => s.grouping === 'where');

  const update = b.clone();
  update._single.update = { ...(b._single.update as object | undefined), [column]: token };
  // The caller's conditions as one group: `a OR b` must not become `a OR (b AND guard)`.
  if (wheres.length > 0) update.clear('where').where((group: Knex.QueryBuilder) => void (group as unknown as BuilderInternals)._statements.push(...wheres));
  update.where((guard: Knex.QueryBuilder) => guard.whereNull(column).orWhere(column, '<=', token as unknown as number)).returning(client.raw('1') as never);

  // The rows the caller's `where` matches, read in the statement's snapshot (before the update).
  const matched = b.clone();
  matched._method = 'select';

  const raw = unprocessed(client);
  // Each fragment goes in as a binding (`?`): the builders as subqueries, the column as an identifier.
  const knexSql: SqlTag<Knex.Raw> = (strings, ...fragments) => raw.raw(strings.join('?'), fragments);
  const asMatched = raw.raw('? AS "pgfence matched"', [matched]);
  const query = countedUpdate(knexSql, raw.raw('?', [update]), asMatched, raw.raw('??', [column]));
  if (b._connection !== undefined) query.connection(b._connection);
  const table = tableName(b._single);
  return {
    toSQL: () => query.toSQL(),
    async execute() {
      let counts: GuardedCounts;
      try {
        counts = ((await runRaw(query)) as DriverResult).rows[0] as unknown as GuardedCounts;
      } catch (err) {
        throw guardedWriteError(err, { call: 'fenced', table, column: o.column, token, where: {} });
      }
      return fencedUpdateResult(counts);
    },
  };
}

/** The builder, checked to be a Knex update of one table that fenced() can guard (before any I/O). */
function updateBuilder(builder: unknown): BuilderInternals {
  const b = builder as Partial<BuilderInternals> | null;
  if (typeof b !== 'object' || b === null || typeof b.clone !== 'function' || !Array.isArray(b._statements) || typeof b._single !== 'object' || typeof b.client !== 'object') {
    throw new InvalidArgumentError('builder', `expected a Knex update query builder (trx('orders').where(...).update({...})), got ${describeType(builder)}`);
  }
  checkPgClient(b.client, 'builder');
  if (b._method !== 'update') {
    throw new InvalidArgumentError('builder', `expected an update (call .update({...}) or .increment() on it), got a ${String(b._method)} query`);
  }
  const refuse = (what: string) => {
    throw new InvalidArgumentError('builder', `fenced() guards an update of one table by its where; this one has ${what}: use fencedUpdate, or add the guard in SQL`);
  };
  const other = b._statements.find((s) => s.grouping !== 'where');
  if (other) refuse(other.grouping === 'with' ? 'a WITH' : other.grouping === 'join' ? 'a join' : `a ${other.grouping} clause`);
  for (const [key, value] of Object.entries(b._single!)) {
    if (!SINGLE_ALLOWED.has(key) && value !== undefined && value !== null && value !== false) refuse(key === 'updateFrom' ? 'updateFrom' : `${key}`);
  }
  const table = b._single!.table;
  const aliased = typeof table === 'object' && table !== null && Object.getPrototypeOf(table) === Object.prototype && Object.values(table).length === 1 && typeof Object.values(table)[0] === 'string';
  if (typeof table !== 'string' && !aliased) refuse('a subquery or expression as its table');
  return b as BuilderInternals;
}

/** The updated table's name as written in the builder (for error messages and the fix they name). */
function tableName(single: Record<string, unknown>): string {
  const table = single.table;
  const name = typeof table === 'string' ? table.trim().split(/\s+as\s+/i)[0]! : String(Object.values(table as object)[0]);
  return typeof single.schema === 'string' ? `${single.schema}.${name}` : name;
}

const FENCED_OPTION_KEYS = optionKeys<{ column?: string }>({ column: true });
