/**
 * The fencing area's statements: every guarded write is one of these two shapes, built from
 * identifiers already validated and quoted (src/fencing/identifiers.ts) and `$n` parameters, never from
 * values. The CTEs' names have a space, so no table name that passes validation can be shadowed by
 * them; the counts read the statement's snapshot, from before the UPDATE (matched - written = refused).
 */

/** The versioned update's guard: the row still has the version read ($1). */
export function versionGuardSql(column: string): string {
  return `${column} = $1`;
}

/** The parts of a guarded statement: the quoted table and column, the row conditions, the guard. */
export interface GuardedParts {
  table: string;
  column: string;
  conditions: string;
  /** The condition that makes the write conditional (the fencing guard, or `version = $1`). */
  guard: string;
}

/**
 * A library's own way to join SQL text with its fragments: Kysely's and Drizzle's `sql` tags, a Knex raw,
 * or `sqlText` for statements built as text. The statements below are written once, as templates, and
 * every data layer instantiates them with its tag.
 */
export type SqlTag<F> = (strings: TemplateStringsArray, ...fragments: F[]) => F;

/** The tag for statements built as text (each fragment is SQL text already). */
export const sqlText: SqlTag<string> = (strings, ...fragments) => strings.reduce((text, part, i) => text + fragments[i - 1]! + part);

/**
 * The fencing guard: the row carries no token yet, or one not newer than the writer's `token` (a
 * placeholder, or a value the library's tag makes a parameter).
 */
export function fencingGuard<F>(tag: SqlTag<F>, column: F, token: F): F {
  return tag`(${column} IS NULL OR ${column} <= ${token})`;
}

/** fencingGuard as text, with the token as `$1` (or a data layer's own placeholder, e.g. TypeORM's `:name`). */
export function fencingGuardSql(column: string, token = '$1'): string {
  return fencingGuard(sqlText, column, token);
}

/** The counted update's CTE: an UPDATE ... RETURNING 1 of the caller's rows. */
export const COUNTED_UPDATE_CTE = '"pgfence updated"';

/**
 * What a counted update reports after its CTE (COUNTED_UPDATE_CTE): rows written, rows `matched` (a FROM
 * item with the caller's WHERE, read in the statement's snapshot, from before the UPDATE: matched -
 * written = refused), and the newest value of `column` among them. CAST rather than `::`, which TypeORM
 * would read as a parameter.
 */
export function countsAfterUpdate<F>(tag: SqlTag<F>, matched: F, column: F): F {
  return tag`SELECT CAST((SELECT count(*) FROM "pgfence updated") AS int) AS written,
       CAST((SELECT count(*) FROM ${matched}) AS int) AS matched,
       CAST((SELECT max(${column}) FROM ${matched}) AS text) AS current`;
}

/** The whole counted update around `update` (the guarded UPDATE ... RETURNING 1, as the library built it). */
export function countedUpdate<F>(tag: SqlTag<F>, update: F, matched: F, column: F): F {
  return tag`WITH "pgfence updated" AS (${update})
${countsAfterUpdate(tag, matched, column)}`;
}

/**
 * One UPDATE of `assignments` where the conditions and the guard hold, reporting rows written, rows
 * matched and the column's newest value among them (fencedUpdate, versionedUpdate).
 *
 * @example
 * ```sql fragment
 * WITH "pgfence updated" AS (UPDATE "invoices" SET "status" = $3, "fencing_token" = $1
 *   WHERE "id" = $2 AND ("fencing_token" IS NULL OR "fencing_token" <= $1) RETURNING 1)
 * SELECT CAST((SELECT count(*) FROM "pgfence updated") AS int) AS written,
 *        CAST((SELECT count(*) FROM "invoices" WHERE "id" = $2) AS int) AS matched,
 *        CAST((SELECT max("fencing_token") FROM "invoices" WHERE "id" = $2) AS text) AS current
 * ```
 */
export function countedUpdateSql(p: GuardedParts, assignments: string[]): string {
  const update = `UPDATE ${p.table} SET ${assignments.join(', ')}
  WHERE ${p.conditions} AND ${p.guard}
  RETURNING 1`;
  return countedUpdate(sqlText, update, `${p.table} WHERE ${p.conditions}`, p.column);
}

/**
 * Stamps the token ($1) on the rows where the guard holds and returns them: one row per claimed row
 * (or one row of NULLs when none was), each carrying the counts in the `meta` columns (fencedClaim).
 */
export function claimSql(p: GuardedParts, meta: { written: string; matched: string; current: string }): string {
  return `WITH "pgfence claimed" AS (
  UPDATE ${p.table} SET ${p.column} = $1
  WHERE ${p.conditions} AND ${p.guard}
  RETURNING *
), "pgfence seen" AS (
  SELECT count(*)::int AS matched, max(${p.column})::text AS current FROM ${p.table} WHERE ${p.conditions}
)
SELECT c.*, (SELECT count(*) FROM "pgfence claimed")::int AS "${meta.written}", s.matched AS "${meta.matched}", s.current AS "${meta.current}"
FROM "pgfence seen" s LEFT JOIN "pgfence claimed" c ON true`;
}
