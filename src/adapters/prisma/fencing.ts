import {
  type FencedClaimResult,
  fencedClaimWith,
  type FencedUpdateResult,
  fencedUpdateWith,
  versionedUpdateWith,
  type VersionedUpdateResult,
} from '../../fencing/index.js';
import { optionKeys, optionsObject } from '../../options.js';
import { columnOf, columnValues, modelTable, rowAsFields, type ModelTable } from './data-model.js';
import type { DefaultFencingField, PrismaFieldName, PrismaModelFields, PrismaModelName, PrismaSet, PrismaWhere } from './model-types.js';
import { prismaSqlExecutor, type PrismaRawClient } from './sql-executor.js';

/** fencedUpdate's spec, checked against the client's models: the model, its fields and their values. */
export interface PrismaFencedUpdateSpec<C, M extends PrismaModelName<C>, F extends string = DefaultFencingField> {
  /** The model, as named in the schema ('Order'); its table through @@map. */
  model: M;
  /** Fields to write (not the fencing field: fencedUpdate writes the token there); columns through @map. */
  set: PrismaSet<C, M, F>;
  /** Equality conditions (null means IS NULL) selecting the rows; at least one. */
  where: PrismaWhere<C, M>;
  /** The holder's fencing token. */
  token: bigint;
  /** The fencing field (a `BigInt?` field); default: the field of the column fencing_token. */
  field?: F & PrismaFieldName<C, M>;
}

/** fencedClaim's spec, checked against the client's models. */
export type PrismaFencedClaimSpec<C, M extends PrismaModelName<C>, F extends string = DefaultFencingField> = Omit<PrismaFencedUpdateSpec<C, M, F>, 'set'>;

/** A claimed row: the model's scalar fields as Prisma reads them, the fencing field the token (a bigint). */
export type PrismaClaimedRow<C, M extends PrismaModelName<C>, F extends string = DefaultFencingField> = Omit<PrismaModelFields<C, M>, F> & {
  [K in F & PrismaFieldName<C, M>]: bigint;
};

/** versionedUpdate's spec, checked against the client's models. */
export interface PrismaVersionedUpdateSpec<C, M extends PrismaModelName<C>, V extends string = 'version'> {
  model: M;
  /** Fields to write (not the version field: versionedUpdate writes `version + 1` there). */
  set: PrismaSet<C, M, V>;
  /** Equality conditions (null means IS NULL) selecting the rows; at least one. */
  where: PrismaWhere<C, M>;
  /** The version you read (a bigint, or a safe integer number). */
  version: bigint | number;
  /** The version field (`BigInt` or `Int`); default: the field of the column version. */
  field?: V & PrismaFieldName<C, M>;
}

interface AnySpec {
  model?: unknown;
  set?: unknown;
  where?: unknown;
  token?: unknown;
  version?: unknown;
  field?: unknown;
}
// fencedClaim's too: a `set` goes on to pgfence's fencedClaim, which refuses it saying why.
const FENCED_KEYS = optionKeys<Omit<AnySpec, 'version'>>({ model: true, set: true, where: true, token: true, field: true });
const VERSIONED_KEYS = optionKeys<Omit<AnySpec, 'token'>>({ model: true, set: true, where: true, version: true, field: true });

/**
 * The model spec as pgfence's table spec: table and columns through @@map and @map (checked before any
 * I/O), values as PostgreSQL takes them. A `set` where none belongs (fencedClaim) goes on as it is, to be refused.
 */
function tableSpec(db: object, s: AnySpec, writes: boolean): { t: ModelTable; spec: Record<string, unknown> } {
  const t = modelTable(db, s.model);
  const spec: Record<string, unknown> = { table: t.table, where: columnValues(t, s.where, 'where') };
  if (s.set !== undefined) spec.set = writes ? columnValues(t, s.set, 'set') : s.set;
  if (s.field !== undefined) spec.column = columnOf(t, s.field, 'field');
  return { t, spec };
}

/**
 * fencedUpdate for Prisma (a client or the `tx` of an interactive transaction): the root export's, with
 * the model and its fields checked against the client's types, and mapped to the table and columns
 * through @@map and @map. Same result.
 *
 * @example
 * ```ts fragment
 * const r = await fencedUpdate(tx, { model: 'Order', set: { status: 'paid' }, where: { id: 42 }, token });
 * if (!r.applied) console.log(r.reason, r.currentToken); // 'stale' and the newer token, or 'missing'
 * ```
 * ```sql fragment
 * WITH "pgfence updated" AS (
 *   UPDATE "orders" SET "status" = $2, "fencing_token" = $1
 *   WHERE "id" = $3 AND ("fencing_token" IS NULL OR "fencing_token" <= $1) RETURNING 1
 * ) SELECT (SELECT count(*) FROM "pgfence updated")::int AS written,
 *          (SELECT count(*) FROM "orders" WHERE "id" = $3)::int AS matched,
 *          (SELECT max("fencing_token") FROM "orders" WHERE "id" = $3)::text AS current
 * ```
 */
export async function fencedUpdate<C extends PrismaRawClient, const M extends PrismaModelName<C>, const F extends string = DefaultFencingField>(
  db: C,
  spec: PrismaFencedUpdateSpec<C, M, F>,
): Promise<FencedUpdateResult> {
  const sql = prismaSqlExecutor(db);
  const s = optionsObject<AnySpec>(spec, 'fencedUpdate spec', FENCED_KEYS);
  return fencedUpdateWith(sql, { ...tableSpec(db, s, true).spec, token: s.token } as never);
}

/**
 * fencedClaim for Prisma: stamps `token` into the rows' fencing field before you read them, so an older
 * holder's later guarded write to them is refused. The rows come back by field name, typed as the
 * model's fields (the fencing field as a bigint). Same result as the root export's.
 *
 * @example
 * ```ts fragment
 * await prisma.$transaction(async (tx) => {
 *   const claim = await fencedClaim(tx, { model: 'Counter', where: { id: 1 }, token });
 *   if (!claim.claimed) return; // a newer holder has the row
 *   await fencedUpdate(tx, { model: 'Counter', set: { n: claim.rows[0]!.n + 1 }, where: { id: 1 }, token });
 * });
 * ```
 */
export async function fencedClaim<C extends PrismaRawClient, const M extends PrismaModelName<C>, const F extends string = DefaultFencingField>(
  db: C,
  spec: PrismaFencedClaimSpec<C, M, F>,
): Promise<FencedClaimResult<PrismaClaimedRow<C, M, F>>> {
  const sql = prismaSqlExecutor(db);
  const s = optionsObject<AnySpec>(spec, 'fencedClaim spec', FENCED_KEYS);
  const { t, spec: claim } = tableSpec(db, s, false);
  const result = await fencedClaimWith<Record<string, unknown>>(sql, { ...claim, token: s.token } as never);
  return { ...result, rows: result.rows.map((row) => rowAsFields(t, row) as PrismaClaimedRow<C, M, F>) };
}

/**
 * versionedUpdate for Prisma: optimistic concurrency, no lock. Writes `set` and `version + 1` only where
 * the row still has the version you read; 'conflict' (with `currentVersion`) when someone wrote it since.
 *
 * @example
 * ```ts fragment
 * const doc = await prisma.document.findUniqueOrThrow({ where: { id: 7 } });
 * const r = await versionedUpdate(prisma, { model: 'Document', set: { body: `${doc.body}!` }, where: { id: 7 }, version: doc.version });
 * if (!r.applied) console.log(r.reason); // 'conflict': read again and retry
 * ```
 */
export async function versionedUpdate<C extends PrismaRawClient, const M extends PrismaModelName<C>, const V extends string = 'version'>(
  db: C,
  spec: PrismaVersionedUpdateSpec<C, M, V>,
): Promise<VersionedUpdateResult> {
  const sql = prismaSqlExecutor(db);
  const s = optionsObject<AnySpec>(spec, 'versionedUpdate spec', VERSIONED_KEYS);
  return versionedUpdateWith(sql, { ...tableSpec(db, s, true).spec, version: s.version } as never);
}
