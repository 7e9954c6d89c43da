import { type CompiledQuery, type Expression, type KyselyPlugin, type OperationNode, type RawBuilder, sql, type UpdateQueryBuilder, type UpdateQueryNode } from 'kysely';
import { describeType, InvalidArgumentError } from '../../core/index.js';
import { optionKeys, optionsObject } from '../../options.js';
import { bareIdentifier, checkToken, COUNTED_UPDATE_CTE, countsAfterUpdate, DEFAULT_FENCING_COLUMN, fencingGuard, type FencedUpdateResult, fencedUpdateResult, type GuardedCounts, guardedWriteError, quoteColumn, type SqlTag } from '../../fencing/index.js';

/** A guarded Kysely update, ready to run: `execute()` reports what it wrote and what it refused, and why. */
export interface FencedUpdateQuery {
  /**
   * Runs the update (one statement); stale vs missing as fencedUpdate reports them.
   *
   * @example
   * ```ts fragment
   * const r = await fenced(db.updateTable('orders').set({ status: 'paid' }).where('id', '=', 1), token).execute();
   * console.log(r.applied, r.written, r.refused, r.reason);
   * ```
   */
  execute(): Promise<FencedUpdateResult>;
  /**
   * The statement it runs, for logging or inspection.
   *
   * @example
   * ```ts fragment
   * console.log(fenced(db.updateTable('orders').set({ status: 'paid' }).where('id', '=', 1), token).compile().sql);
   * ```
   */
  compile(): CompiledQuery;
}

/**
 * Adds the fencing guard to a Kysely update: it writes `token` into the fencing column and applies
 * only where that column is NULL or not newer than `token`. The same statement counts the rows the
 * update's `where` matched, so the result says whether a newer holder had written them ('stale',
 * with `currentToken`) or no row matched ('missing'), as fencedUpdate does.
 *
 * @example
 * ```ts fragment
 * const r = await fenced(trx.updateTable('orders').set({ status: 'paid' }).where('id', '=', 1), lock.token).execute();
 * if (!r.applied) console.log(r.reason); // 'stale': a newer holder has written; 'missing': no such order
 * ```
 */
export function fenced<DB, UT extends keyof DB, TB extends keyof DB, O>(
  builder: UpdateQueryBuilder<DB, UT, TB, O>,
  token: bigint,
  opts?: { column?: string },
): FencedUpdateQuery {
  if (!isUpdateQueryBuilder(builder)) {
    throw new InvalidArgumentError('builder', `expected a Kysely update query builder, got ${describeType(builder)}`);
  }
  checkToken(token);
  const o = optionsObject<{ column?: string }>(opts, 'fenced options', FENCED_OPTION_KEYS);
  const column = bareIdentifier(quoteColumn(o.column ?? DEFAULT_FENCING_COLUMN, 'column'));
  // The caller's rows, before the guard: what the count of matched rows reads.
  const unguarded = builder.toOperationNode();
  if (unguarded.from || unguarded.joins || unguarded.with) {
    throw new InvalidArgumentError('builder', 'fenced() guards an update of one table (no FROM, joins or WITH): use fencedUpdate, or add the guard in SQL');
  }
  const ref = sql.ref(column);
  const guarded = (builder as unknown as UpdateQueryBuilder<any, any, any, any>)
    .set(() => ({ [column]: token }))
    .where(() => fencingGuard(sql as SqlTag<unknown>, ref, token) as RawBuilder<boolean>)
    .returning(sql<number>`1`.as('pgfence_written'));
  // Last of the executor's plugins: the caller's own (say, CamelCasePlugin) have shaped the update already.
  const counting: KyselyPlugin = {
    transformQuery: ({ node }) => countingStatement(node as UpdateQueryNode, unguarded.where?.where, ref),
    transformResult: async ({ result }) => result,
  };
  const query = guarded.withPlugin(counting);
  return {
    compile: () => query.compile(),
    async execute() {
      try {
        // The statement's one row (its RETURNING makes Kysely hand back the rows).
        const [counts] = (await query.execute()) as unknown as GuardedCounts[];
        return fencedUpdateResult(counts!);
      } catch (err) {
        throw guardedWriteError(err, { call: 'fenced', table: tableName(unguarded), column: o.column, token, where: {} });
      }
    },
  };
}

/**
 * The guarded update as a data-modifying CTE, and the rows its `where` matches counted from the
 * statement's snapshot (before the update): matched - written = refused, as fencedUpdate counts them.
 * A plugin must give back an update (Kysely checks the kind), so the CTE's head goes in the update's
 * WITH slot and the SELECT after it in its end modifiers:
 *   with "pgfence updated" AS ( update ... returning 1 ) SELECT written, matched, current
 */
function countingStatement(update: UpdateQueryNode, where: OperationNode | undefined, column: ReturnType<typeof sql.ref>): UpdateQueryNode {
  const node = (n: OperationNode) => ({ toOperationNode: () => n });
  const table = node(update.table!);
  const matched = where ? sql`${table} WHERE ${node(where)}` : sql`${table}`;
  const head = sql.raw(`${COUNTED_UPDATE_CTE} AS (`).toOperationNode();
  const tail = sql`) ${countsAfterUpdate(sql as SqlTag<Expression<unknown>>, matched, column)}`.toOperationNode();
  return { ...update, with: { kind: 'WithNode', expressions: [head] } as unknown as UpdateQueryNode['with'], endModifiers: [...(update.endModifiers ?? []), tail] };
}

/** The updated table's name as written in the builder (for error messages). */
function tableName(update: UpdateQueryNode): string {
  const t = update.table as { table?: { identifier?: { name?: string } } } | undefined;
  return t?.table?.identifier?.name ?? 'the updated table';
}

const FENCED_OPTION_KEYS = optionKeys<{ column?: string }>({ column: true });

/** A Kysely update builder: the methods fenced() calls, and an update as its operation node. */
function isUpdateQueryBuilder(b: unknown): boolean {
  if (typeof b !== 'object' || b === null) return false;
  const m = b as Record<string, unknown>;
  if (!['set', 'where', 'returning', 'withPlugin', 'toOperationNode', 'compile'].every((name) => typeof m[name] === 'function')) return false;
  try {
    return (m.toOperationNode as () => { kind?: unknown })().kind === 'UpdateQueryNode';
  } catch {
    return false;
  }
}
