import { describeType, InvalidArgumentError, type SqlExecutor } from '../core/index.js';
import { optionKeys, optionsObject } from '../options.js';
import { guardedWriteError } from './guarded-error.js';
import { countedUpdateSql, fencingGuardSql } from './guarded-sql.js';
import { bareIdentifier, DEFAULT_FENCING_COLUMN, quoteColumn, quoteTable } from './identifiers.js';

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

const FENCED_UPDATE_SPEC_KEYS = optionKeys<FencedUpdateSpec>({ table: true, set: true, where: true, token: true, column: true });

export interface FencedUpdateResult {
  /** True when every row the `where` matched was written (at least one). */
  applied: boolean;
  /** Rows written (their token was NULL or not newer than `token`). */
  written: number;
  /** Rows matched but kept because a newer token has written them. */
  refused: number;
  /**
   * Why not applied: a newer token has written (some of) the rows ('stale'), or no row matched
   * ('missing'). With several rows, 'stale' may come with `written > 0`: roll back if that is all or nothing.
   */
  reason?: 'stale' | 'missing';
  /** The newest token among the refused rows. */
  currentToken?: bigint;
}

/** The parts every guarded statement shares: quoted names, the guard's value as $1, the row filter. */
export interface GuardedTarget {
  table: string;
  column: string;
  values: unknown[];
  /** Adds a value as the next parameter and returns its placeholder. */
  param(value: unknown): string;
  /** The `where` equalities, ANDed. */
  conditions: string;
}

/**
 * Validates a spec's table, column and `where` (before any I/O) and prepares their SQL, with `first`
 * (the token or the version the guard compares with, already validated) as $1.
 */
export function rowTarget(s: { table?: unknown; where?: unknown; column?: unknown }, defaultColumn: string, first: unknown): GuardedTarget {
  const table = quoteTable(s.table);
  const column = quoteColumn(s.column ?? defaultColumn, 'column');
  const values: unknown[] = [first];
  const param = (v: unknown) => {
    values.push(v);
    return `$${values.length}`;
  };
  const conditions = entriesOf(s.where, 'where', false)
    .map(([name, value]) => {
      const col = quoteColumn(name, `where.${name}`);
      return value === null ? `${col} IS NULL` : `${col} = ${param(value)}`;
    })
    .join(' AND ');
  return { table, column, values, param, conditions };
}

/** rowTarget for a fencing token, with the guard `(column IS NULL OR column <= $1)`. */
export function guardedTarget(s: { table?: unknown; where?: unknown; token?: unknown; column?: unknown }): GuardedTarget & { token: bigint; guard: string } {
  const token = checkToken(s.token);
  const t = rowTarget(s, DEFAULT_FENCING_COLUMN, token);
  return { ...t, token, guard: fencingGuardSql(t.column) };
}

/** `set`'s assignments as SQL (values as parameters); `column` (the guard's own) may not be among them. */
export function assignmentsOf(set: unknown, t: GuardedTarget, allowEmpty: boolean, writtenBy: string): string[] {
  return entriesOf(set, 'set', allowEmpty).map(([name, value]) => {
    const col = quoteColumn(name, `set.${name}`);
    if (col === t.column) throw new InvalidArgumentError(`set.${name}`, `the ${bareIdentifier(t.column)} column is written by ${writtenBy} itself`);
    return `${col} = ${t.param(value)}`;
  });
}

/**
 * One UPDATE that the database guards: it writes only where the row's token is not newer than the
 * holder's (`fencing_token IS NULL OR fencing_token <= $token`) and stores the token with the write.
 * The same statement counts the rows it matched, so it reports what it refused and why. Identifiers
 * are validated and quoted; every value is a parameter.
 */
function fencedUpdateQuery(spec: FencedUpdateSpec): { text: string; values: unknown[] } {
  const s = optionsObject<FencedUpdateSpec>(spec, 'fencedUpdate spec', FENCED_UPDATE_SPEC_KEYS);
  const t = guardedTarget(s);
  const assignments = assignmentsOf(s.set, t, true, 'fencedUpdate');
  return { text: countedUpdateSql(t, [...assignments, `${t.column} = $1`]), values: t.values };
}

/** What one guarded statement saw: rows written, rows matched, the newest token among them. */
export interface GuardedCounts {
  written: number;
  matched: number;
  current: string | null;
}

/** Runs a guarded UPDATE (fencedUpdate of either driver): validates the spec, then one statement. */
export async function fencedUpdateWith(db: SqlExecutor, spec: FencedUpdateSpec): Promise<FencedUpdateResult> {
  const { text, values } = fencedUpdateQuery(spec);
  let row: GuardedCounts;
  try {
    [row] = (await db.query<GuardedCounts>(text, values)) as [GuardedCounts];
  } catch (err) {
    throw guardedWriteError(err, { call: 'fencedUpdate', ...spec });
  }
  return fencedUpdateResult(row);
}

export function fencedUpdateResult(row: GuardedCounts): FencedUpdateResult {
  const written = row.written;
  // Never below 0: a row the UPDATE could write was in its snapshot, hence counted as matched.
  const refused = Math.max(0, row.matched - written);
  if (row.matched === 0 && written === 0) return { applied: false, written: 0, refused: 0, reason: 'missing' };
  if (refused === 0) return { applied: true, written, refused: 0 };
  // Written rows had a token <= ours and refused ones a newer one: the maximum is a refused row's.
  return { applied: false, written, refused, reason: 'stale', ...(row.current === null ? {} : { currentToken: BigInt(row.current) }) };
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
