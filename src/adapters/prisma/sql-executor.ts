import { describeType, InvalidArgumentError, type SqlExecutor } from '../../core/index.js';
import { driverError } from './driver-error.js';

/**
 * What pgfence needs of a Prisma client, an interactive transaction client (the `tx` of
 * prisma.$transaction(async (tx) => ...)) or an extended client: its raw-SQL methods.
 */
export interface PrismaRawClient {
  /**
   * Prisma's: one statement with $1, $2, ... parameters; its rows.
   *
   * @example
   * ```ts fragment
   * const rows = await tx.$queryRawUnsafe<{ n: number }[]>('SELECT $1::int AS n', 1);
   * ```
   */
  $queryRawUnsafe<T = unknown>(query: string, ...values: any[]): PromiseLike<T>;
  /**
   * Prisma's: a statement (or, without parameters, a script of several); the count of rows it changed.
   *
   * @example
   * ```ts fragment
   * const changed = await tx.$executeRawUnsafe('UPDATE orders SET status = $1 WHERE id = $2', 'paid', 42);
   * ```
   */
  $executeRawUnsafe(query: string, ...values: any[]): PromiseLike<number>;
}

/**
 * A Prisma client or transaction client as a SqlExecutor: statements go through $queryRawUnsafe
 * ($1, $2, ... as PostgreSQL numbers them), scripts through $executeRawUnsafe (without parameters the
 * driver adapter sends them as one simple query, which may hold many statements). Failures are thrown
 * as the PostgreSQL error Prisma wraps (driver-error.ts). `argument` and `expected` name the caller's
 * argument in the InvalidArgumentError for anything else.
 */
export function prismaSqlExecutor(db: unknown, argument = 'db', expected = 'a Prisma client or interactive transaction client'): SqlExecutor {
  const p = db as Partial<PrismaRawClient> | null;
  // The query engine too: Prisma's client and its transaction clients carry it; a look-alike with two methods does not.
  const engine = (db as { _engine?: unknown } | null)?._engine;
  if (typeof db !== 'object' || db === null || typeof p!.$queryRawUnsafe !== 'function' || typeof p!.$executeRawUnsafe !== 'function' || typeof engine !== 'object' || engine === null) {
    throw new InvalidArgumentError(argument, `expected ${expected}, got ${describeType(db)}`);
  }
  const prisma = db as PrismaRawClient;
  return {
    // $queryRawUnsafe cannot run a multi-statement script, and $executeRawUnsafe reports only a count.
    scriptResults: false,
    async query<R>(text: string, values: unknown[]) {
      try {
        return await prisma.$queryRawUnsafe<R[]>(text, ...values);
      } catch (err) {
        throw driverError(err);
      }
    },
    async script(text: string) {
      try {
        await prisma.$executeRawUnsafe(text);
      } catch (err) {
        throw driverError(err);
      }
      return null;
    },
  };
}
