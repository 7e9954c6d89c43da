import type { Kysely, Selectable, Transaction, Updateable } from 'kysely';
import { type FencedClaimResult, type FencedClaimSpec, fencedClaimWith, type FencedUpdateResult, type FencedUpdateSpec, fencedUpdateWith, type FencingColumnOptions, fencingColumnSql, type VersionColumnOptions, versionColumnSql, versionedUpdateWith, type VersionedUpdateResult, type VersionedUpdateSpec } from '../../fencing/index.js';
import { kyselySqlExecutor, type AnyKysely } from './sql-executor.js';

/** The tables of a Kysely database type, by the names Kysely uses (`schema.table` included). */
export type TableName<DB> = keyof DB & string;
/** A column of a table of a Kysely database type. */
export type ColumnName<DB, TB extends TableName<DB>> = keyof Selectable<DB[TB]> & string;

/** fencedUpdate's spec, checked against the Kysely database type: the table, its columns and their values. */
export interface KyselyFencedUpdateSpec<DB, TB extends TableName<DB>, C extends string = 'fencing_token'> {
  table: TB;
  /** Columns to write (not the fencing column: fencedUpdate writes the token there). */
  set: Omit<Updateable<DB[TB]>, C>;
  /** Equality conditions (null means IS NULL) selecting the rows; at least one. */
  where: { [K in ColumnName<DB, TB>]?: Selectable<DB[TB]>[K] | null };
  /** The holder's fencing token. */
  token: bigint;
  /** The fencing column; default 'fencing_token'. */
  column?: C & ColumnName<DB, TB>;
}

/** fencedClaim's spec, checked against the Kysely database type. */
export type KyselyFencedClaimSpec<DB, TB extends TableName<DB>, C extends string = 'fencing_token'> = Omit<
  KyselyFencedUpdateSpec<DB, TB, C>,
  'set'
>;

/** A claimed row: the table's row as Kysely selects it, its fencing column the token (a bigint). */
export type ClaimedRow<DB, TB extends TableName<DB>, C extends string = 'fencing_token'> = Omit<Selectable<DB[TB]>, C> & {
  [K in C]: bigint;
};

/**
 * fencedUpdate for Kysely (a Kysely instance or a transaction): the root export's, with the table
 * and its columns checked against the database type. Same result.
 *
 * @example
 * ```ts fragment
 * const r = await fencedUpdate(db, { table: 'orders', set: { status: 'paid' }, where: { id: 1 }, token: lease.token });
 * if (!r.applied) console.log(r.reason, r.currentToken); // 'stale' and the newer token, or 'missing'
 * ```
 */
export async function fencedUpdate<DB, TB extends TableName<DB>, C extends string = 'fencing_token'>(
  db: Kysely<DB> | Transaction<DB>,
  spec: KyselyFencedUpdateSpec<DB, TB, C>,
): Promise<FencedUpdateResult> {
  return fencedUpdateWith(kyselySqlExecutor(db), spec as unknown as FencedUpdateSpec);
}

/**
 * fencedClaim for Kysely (a Kysely instance or a transaction): stamps `token` into the rows' fencing
 * column before you read them, so an older holder's later guarded write to them is refused. The rows
 * are typed from the database type (the fencing column as a bigint). Same result as the root export's.
 *
 * @example
 * ```ts fragment
 * await db.transaction().execute(async (trx) => {
 *   const claim = await fencedClaim(trx, { table: 'counters', where: { id: 1 }, token });
 *   if (!claim.claimed) return; // a newer holder has the row
 *   await fencedUpdate(trx, { table: 'counters', set: { n: claim.rows[0]!.n + 1 }, where: { id: 1 }, token });
 * });
 * ```
 */
export async function fencedClaim<DB, TB extends TableName<DB>, C extends string = 'fencing_token'>(
  db: Kysely<DB> | Transaction<DB>,
  spec: KyselyFencedClaimSpec<DB, TB, C>,
): Promise<FencedClaimResult<ClaimedRow<DB, TB, C>>> {
  return fencedClaimWith<ClaimedRow<DB, TB, C>>(kyselySqlExecutor(db), spec as unknown as FencedClaimSpec);
}

/**
 * Adds the fencing column (and, with `enforce`, the trigger) to one of your tables, for use inside
 * your own Kysely migrations: `up: (db) => addFencingColumn(db, 'orders', { enforce: true })`.
 *
 * @example
 * ```ts fragment
 * // In one of your own Kysely migrations:
 * const up = (db: Kysely<any>) => addFencingColumn(db, 'orders', { enforce: true });
 * ```
 */
export async function addFencingColumn(db: AnyKysely, table: string, opts?: FencingColumnOptions): Promise<void> {
  const text = fencingColumnSql(table, opts);
  await kyselySqlExecutor(db).script(text);
}

/** versionedUpdate's spec, checked against the Kysely database type. */
export interface KyselyVersionedUpdateSpec<DB, TB extends TableName<DB>, C extends string = 'version'> {
  table: TB;
  /** Columns to write (not the version column: versionedUpdate writes `version + 1` there). */
  set: Omit<Updateable<DB[TB]>, C>;
  /** Equality conditions (null means IS NULL) selecting the rows; at least one. */
  where: { [K in ColumnName<DB, TB>]?: Selectable<DB[TB]>[K] | null };
  /** The version you read (a bigint, or a safe integer number). */
  version: bigint | number;
  /** The version column; default 'version'. */
  column?: C & ColumnName<DB, TB>;
}

/**
 * versionedUpdate for Kysely: optimistic concurrency, no lock. Writes `set` and `version + 1` only where
 * the row still has the version you read; 'conflict' (with `currentVersion`) when someone wrote it since.
 *
 * @example
 * ```ts fragment
 * const doc = await db.selectFrom('documents').select(['body', 'version']).where('id', '=', 7).executeTakeFirstOrThrow();
 * const r = await versionedUpdate(db, { table: 'documents', set: { body: doc.body + '!' }, where: { id: 7 }, version: BigInt(doc.version) });
 * if (!r.applied) console.log(r.reason); // 'conflict': read again and retry
 * ```
 */
export async function versionedUpdate<DB, TB extends TableName<DB>, C extends string = 'version'>(
  db: Kysely<DB> | Transaction<DB>,
  spec: KyselyVersionedUpdateSpec<DB, TB, C>,
): Promise<VersionedUpdateResult> {
  return versionedUpdateWith(kyselySqlExecutor(db), spec as unknown as VersionedUpdateSpec);
}

/**
 * Adds the version column (bigint NOT NULL DEFAULT 0) to one of your tables, inside your own Kysely
 * migrations: `up: (db) => addVersionColumn(db, 'documents')`.
 *
 * @example
 * ```ts fragment
 * const up = (db: Kysely<any>) => addVersionColumn(db, 'documents');
 * ```
 */
export async function addVersionColumn(db: AnyKysely, table: string, opts?: VersionColumnOptions): Promise<void> {
  await kyselySqlExecutor(db).script(versionColumnSql(table, opts));
}
