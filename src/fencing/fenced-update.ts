import { InvalidArgumentError, StaleTokenError } from '../errors.js';
import { describeType } from '../keys.js';
import { optionKeys, optionsObject } from '../options.js';
import { quoteColumn, quoteTable } from './identifiers.js';

export interface FencedUpdateSpec {
  /** `table` or `schema.table` (plain identifiers, case kept). */
  table: string;
  /** Columns to write. */
  set: Record<string, unknown>;
  /** Equality conditions (null means IS NULL) selecting the rows; at least one. */
  where: Record<string, unknown>;
  /** The holder's fencing token. */
  token: bigint;
  /** The fencing column; default 'fencing_token'. */
  column?: string;
}
export const FENCED_UPDATE_SPEC_KEYS = optionKeys<FencedUpdateSpec>({ table: true, set: true, where: true, token: true, column: true });

export interface FencedUpdateResult {
  applied: boolean;
  /** Why nothing was written: a newer token has written the row ('stale'), or no row matched ('missing'). */
  reason?: 'stale' | 'missing';
  /** The row's token when the write was refused as stale. */
  currentToken?: bigint;
}

export const DEFAULT_FENCING_COLUMN = 'fencing_token';

/**
 * One UPDATE that the database guards: it writes only where the row's token is not newer than the
 * holder's (`fencing_token IS NULL OR fencing_token <= $token`) and stores the token with the write.
 * The same statement reports why nothing was written. Identifiers are validated and quoted; every
 * value is a parameter.
 */
export function fencedUpdateQuery(spec: FencedUpdateSpec): { text: string; values: unknown[] } {
  const s = optionsObject<FencedUpdateSpec>(spec, 'fencedUpdate spec', FENCED_UPDATE_SPEC_KEYS);
  const table = quoteTable(s.table);
  const column = quoteColumn(s.column ?? DEFAULT_FENCING_COLUMN, 'column');
  const token = checkToken(s.token);
  const values: unknown[] = [token];
  const param = (v: unknown) => {
    values.push(v);
    return `$${values.length}`;
  };
  const setEntries = entriesOf(s.set, 'set', true);
  const whereEntries = entriesOf(s.where, 'where', false);
  const assignments = setEntries.map(([name, value]) => {
    const col = quoteColumn(name, `set.${name}`);
    if (col === column) throw new InvalidArgumentError(`set.${name}`, 'the fencing column is written by fencedUpdate itself');
    return `${col} = ${param(value)}`;
  });
  const conditions = whereEntries
    .map(([name, value]) => {
      const col = quoteColumn(name, `where.${name}`);
      return value === null ? `${col} IS NULL` : `${col} = ${param(value)}`;
    })
    .join(' AND ');
  const text = `WITH updated AS (
  UPDATE ${table} SET ${[...assignments, `${column} = $1`].join(', ')}
  WHERE ${conditions} AND (${column} IS NULL OR ${column} <= $1)
  RETURNING 1
)
SELECT (SELECT count(*) FROM updated)::int AS applied,
       (SELECT count(*) FROM ${table} WHERE ${conditions})::int AS matched,
       (SELECT max(${column}) FROM ${table} WHERE ${conditions})::text AS current`;
  return { text, values };
}

export function fencedUpdateResult(row: { applied: number; matched: number; current: string | null }): FencedUpdateResult {
  if (row.applied > 0) return { applied: true };
  if (row.matched === 0) return { applied: false, reason: 'missing' };
  return { applied: false, reason: 'stale', ...(row.current === null ? {} : { currentToken: BigInt(row.current) }) };
}

export function checkToken(token: unknown, argument = 'token'): bigint {
  if (typeof token !== 'bigint') throw new InvalidArgumentError(argument, `expected a bigint fencing token, got ${describeType(token)}`);
  if (token <= 0n || token > 2n ** 63n - 1n) throw new InvalidArgumentError(argument, `a fencing token is a positive int64, got ${token}`);
  return token;
}

function entriesOf(value: unknown, argument: string, allowEmpty: boolean): [string, unknown][] {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new InvalidArgumentError(argument, `expected an object of column: value, got ${describeType(value)}`);
  }
  const entries = Object.entries(value);
  if (!allowEmpty && entries.length === 0) {
    throw new InvalidArgumentError(argument, 'needs at least one column: a fenced update of every row is almost surely a mistake');
  }
  for (const [name, v] of entries) {
    if (v === undefined) throw new InvalidArgumentError(`${argument}.${name}`, 'is undefined (pass null to mean NULL)');
  }
  return entries;
}

/** Converts a trigger refusal (SQLSTATE PGF01) into a StaleTokenError; other errors pass through. */
export function staleFromTrigger(err: unknown, token: bigint): unknown {
  if ((err as { code?: unknown } | null)?.code !== 'PGF01') return err;
  const e = new StaleTokenError(token, undefined, (err as Error).message);
  (e as { cause?: unknown }).cause = err;
  return e;
}
