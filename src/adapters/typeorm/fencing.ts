import type { EntityTarget, ObjectLiteral } from 'typeorm';
import {
  DEFAULT_FENCING_COLUMN,
  DEFAULT_VERSION_COLUMN,
  type FencedClaimResult,
  fencedClaimWith,
  type FencedUpdateResult,
  fencedUpdateWith,
  versionedUpdateWith,
  type VersionedUpdateResult,
} from '../../fencing/index.js';
import { optionKeys, optionsObject } from '../../options.js';
import { columnName, columnValues, entityMetadata, tableOf, toEntity } from './entities.js';
import { type TypeormClient, typeormSqlExecutor, typeormTarget } from './sql-executor.js';

/** The data properties of an entity type (its methods left out). */
export type EntityProperty<E> = { [K in keyof E & string]-?: E[K] extends (...args: never[]) => unknown ? never : K }[keyof E & string];

/** Values for some of an entity's properties, typed as the entity has them (null writes or matches NULL); `Without`: properties left out. */
export type EntityColumns<E, Without extends string = never> = { [K in Exclude<EntityProperty<E>, Without>]?: E[K] | null };

/** fencedUpdate's spec, typed from the entity: `set` and `where` name its properties, with their types. */
export interface TypeormFencedUpdateSpec<E, C extends string = 'fencing_token'> {
  /** An entity of the DataSource: its class, its EntitySchema, or its name (then nothing is checked at compile time). */
  entity: EntityTarget<E>;
  /** Properties to write (not the fencing column's: fencedUpdate writes the token there). */
  set: EntityColumns<E, C>;
  /** Equality conditions on properties (null means IS NULL) selecting the rows; at least one. */
  where: EntityColumns<E>;
  /** The holder's fencing token. */
  token: bigint;
  /** The fencing column: an entity property or a column name; default 'fencing_token' (the entity need not map it). */
  column?: C;
}

/** fencedClaim's spec, typed from the entity. */
export type TypeormFencedClaimSpec<E, C extends string = 'fencing_token'> = Omit<TypeormFencedUpdateSpec<E, C>, 'set'>;

/** versionedUpdate's spec, typed from the entity. */
export interface TypeormVersionedUpdateSpec<E, C extends string = 'version'> {
  entity: EntityTarget<E>;
  /** Properties to write (not the version column's: versionedUpdate writes `version + 1` there). */
  set: EntityColumns<E, C>;
  /** Equality conditions on properties (null means IS NULL) selecting the rows; at least one. */
  where: EntityColumns<E>;
  /** The version you read (a bigint, or a safe integer number as a `@VersionColumn` reads). */
  version: bigint | number;
  /** The version column: an entity property or a column name; default the entity's `@VersionColumn`, else 'version'. */
  column?: C;
}

const UPDATE_KEYS = optionKeys<TypeormFencedUpdateSpec<unknown>>({ entity: true, set: true, where: true, token: true, column: true });
const CLAIM_KEYS = optionKeys<TypeormFencedClaimSpec<unknown>>({ entity: true, where: true, token: true, column: true });
const VERSIONED_KEYS = optionKeys<TypeormVersionedUpdateSpec<unknown>>({ entity: true, set: true, where: true, version: true, column: true });

/**
 * fencedUpdate for TypeORM (a transaction's EntityManager or QueryRunner, or `dataSource.manager`):
 * the root export's, with `set` and `where` typed from the entity and mapped to its columns, their values
 * prepared as TypeORM writes them (transformers included). Same result.
 *
 * @example
 * ```ts fragment
 * import { EntitySchema, type EntityManager } from 'typeorm';
 * import { fencedUpdate } from 'pgfence/typeorm';
 *
 * interface Order { id: number; status: string; fencingToken: string | null }
 * const Order = new EntitySchema<Order>({ name: 'Order', tableName: 'orders', columns: {
 *   id: { type: Number, primary: true }, status: { type: String },
 *   fencingToken: { type: 'bigint', name: 'fencing_token', nullable: true } } });
 *
 * async function markPaid(manager: EntityManager, token: bigint) {
 *   const r = await fencedUpdate(manager, { entity: Order, set: { status: 'paid' }, where: { id: 42 }, token });
 *   if (!r.applied) console.log(r.reason, r.currentToken); // 'stale' and the newer token, or 'missing'
 * }
 * ```
 */
export async function fencedUpdate<E extends ObjectLiteral, C extends string = 'fencing_token'>(
  manager: TypeormClient,
  spec: TypeormFencedUpdateSpec<E, C>,
): Promise<FencedUpdateResult> {
  const target = typeormTarget(manager);
  const s = optionsObject<TypeormFencedUpdateSpec<E, C>>(spec, 'fencedUpdate spec', UPDATE_KEYS);
  const metadata = entityMetadata(target.dataSource, s.entity);
  return fencedUpdateWith(typeormSqlExecutor(target, { scriptResults: false }), {
    table: tableOf(metadata),
    set: columnValues(target.dataSource, metadata, s.set, 'set'),
    where: columnValues(target.dataSource, metadata, s.where, 'where'),
    token: s.token!,
    column: columnName(metadata, s.column ?? DEFAULT_FENCING_COLUMN),
  });
}

/**
 * fencedClaim for TypeORM: stamps `token` into the rows' fencing column before you read them, so an
 * older holder's later guarded write to them is refused. The claimed rows come back as entities
 * (property names, values hydrated as TypeORM loads them), typed as the entity.
 *
 * @example
 * ```ts fragment
 * import { EntitySchema, type DataSource } from 'typeorm';
 * import { fencedClaim, fencedUpdate } from 'pgfence/typeorm';
 *
 * interface Counter { id: number; n: number }
 * const Counter = new EntitySchema<Counter>({ name: 'Counter', tableName: 'counters',
 *   columns: { id: { type: Number, primary: true }, n: { type: Number } } });
 *
 * async function increment(dataSource: DataSource, token: bigint) {
 *   await dataSource.transaction(async (manager) => {
 *     const claim = await fencedClaim(manager, { entity: Counter, where: { id: 1 }, token });
 *     if (!claim.claimed) return; // a newer holder has the row
 *     await fencedUpdate(manager, { entity: Counter, set: { n: claim.rows[0]!.n + 1 }, where: { id: 1 }, token });
 *   });
 * }
 * ```
 */
export async function fencedClaim<E extends ObjectLiteral, C extends string = 'fencing_token'>(
  manager: TypeormClient,
  spec: TypeormFencedClaimSpec<E, C>,
): Promise<FencedClaimResult<E>> {
  const target = typeormTarget(manager);
  const s = optionsObject<TypeormFencedClaimSpec<E, C> & { set?: unknown }>(spec, 'fencedClaim spec', CLAIM_KEYS);
  const metadata = entityMetadata(target.dataSource, s.entity);
  const column = columnName(metadata, s.column ?? DEFAULT_FENCING_COLUMN);
  const result = await fencedClaimWith<Record<string, unknown>>(typeormSqlExecutor(target, { scriptResults: false }), {
    table: tableOf(metadata),
    where: columnValues(target.dataSource, metadata, s.where, 'where'),
    token: s.token!,
    column,
  });
  // The token as PostgreSQL returns an int8 (a string), so that the fencing property reads as TypeORM would load it.
  const token = String(s.token);
  const rows = result.rows.map((row) => toEntity<E>(target.dataSource, metadata, target.runner ?? undefined, { ...row, [column]: token }));
  return { ...result, rows };
}

/**
 * versionedUpdate for TypeORM: optimistic concurrency, no lock. Writes `set` and `version + 1` only where
 * the row still has the version you read; 'conflict' (with `currentVersion`) when someone wrote it since.
 * The version column defaults to the entity's `@VersionColumn` (TypeORM's own updates increment it too).
 *
 * @example
 * ```ts fragment
 * import { EntitySchema, type EntityManager } from 'typeorm';
 * import { versionedUpdate } from 'pgfence/typeorm';
 *
 * interface Doc { id: number; body: string; version: number }
 * const Doc = new EntitySchema<Doc>({ name: 'Doc', tableName: 'documents', columns: {
 *   id: { type: Number, primary: true }, body: { type: String }, version: { type: Number, version: true } } });
 *
 * async function append(manager: EntityManager) {
 *   const doc = await manager.findOneByOrFail(Doc, { id: 7 });
 *   const r = await versionedUpdate(manager, { entity: Doc, set: { body: doc.body + '!' }, where: { id: 7 }, version: doc.version });
 *   if (!r.applied) console.log(r.reason); // 'conflict': read again and retry
 * }
 * ```
 */
export async function versionedUpdate<E extends ObjectLiteral, C extends string = 'version'>(
  manager: TypeormClient,
  spec: TypeormVersionedUpdateSpec<E, C>,
): Promise<VersionedUpdateResult> {
  const target = typeormTarget(manager);
  const s = optionsObject<TypeormVersionedUpdateSpec<E, C>>(spec, 'versionedUpdate spec', VERSIONED_KEYS);
  const metadata = entityMetadata(target.dataSource, s.entity);
  const column = s.column === undefined ? (metadata.versionColumn?.databaseName ?? DEFAULT_VERSION_COLUMN) : columnName(metadata, s.column);
  return versionedUpdateWith(typeormSqlExecutor(target, { scriptResults: false }), {
    table: tableOf(metadata),
    set: columnValues(target.dataSource, metadata, s.set, 'set'),
    where: columnValues(target.dataSource, metadata, s.where, 'where'),
    version: s.version!,
    column,
  });
}
