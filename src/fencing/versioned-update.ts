import { describeType, InvalidArgumentError, type SqlExecutor } from '../core/index.js';
import { optionKeys, optionsObject } from '../options.js';
import { assignmentsOf, rowTarget } from './fenced-update.js';
import { guardedWriteError } from './guarded-error.js';
import { countedUpdateSql, versionGuardSql } from './guarded-sql.js';
import { DEFAULT_VERSION_COLUMN } from './column-sql.js';

export interface VersionedUpdateSpec {
  /** `table` or `schema.table` (plain identifiers, case kept). */
  table: string;
  /** Columns to write (not the version column: versionedUpdate writes `version + 1` there). */
  set: Record<string, unknown>;
  /** Equality conditions (null means IS NULL) selecting the rows; at least one. */
  where: Record<string, unknown>;
  /** The version the caller read (a bigint, or a safe integer number). */
  version: bigint | number;
  /** The version column; default 'version'. */
  column?: string;
}

const VERSIONED_UPDATE_SPEC_KEYS = optionKeys<VersionedUpdateSpec>({ table: true, set: true, where: true, version: true, column: true });

export interface VersionedUpdateResult {
  /** True when every row the `where` matched still had `version` (at least one) and was written. */
  applied: boolean;
  /** Why not applied: another writer changed (some of) the rows since they were read ('conflict'), or no row matched ('missing'). */
  reason?: 'conflict' | 'missing';
  /** Applied: the rows' new version (`version + 1`). Conflict: the newest version among the rows now. */
  currentVersion?: bigint;
}

/**
 * One compare-and-set UPDATE (optimistic concurrency, no lock): writes `set` and `version + 1` only
 * where the row's version is still the one read. The same statement counts the rows the `where`
 * matched, so it tells a conflict from a missing row. Identifiers are validated and quoted; every value
 * is a parameter.
 */
function versionedUpdateQuery(spec: VersionedUpdateSpec): { text: string; values: unknown[] } {
  const s = optionsObject<VersionedUpdateSpec>(spec, 'versionedUpdate spec', VERSIONED_UPDATE_SPEC_KEYS);
  const t = rowTarget(s, DEFAULT_VERSION_COLUMN, checkVersion(s.version));
  const assignments = assignmentsOf(s.set, t, false, 'versionedUpdate');
  const text = countedUpdateSql({ ...t, guard: versionGuardSql(t.column) }, [...assignments, `${t.column} = ${t.column} + 1`]);
  return { text, values: t.values };
}

/** Runs a versioned update (versionedUpdate of every driver and adapter): validates the spec, then one statement. */
export async function versionedUpdateWith(db: SqlExecutor, spec: VersionedUpdateSpec): Promise<VersionedUpdateResult> {
  const { text, values } = versionedUpdateQuery(spec);
  let row: { written: number; matched: number; current: string | null };
  try {
    [row] = (await db.query<typeof row>(text, values)) as [typeof row];
  } catch (err) {
    throw guardedWriteError(err, { call: 'versionedUpdate', table: spec.table, column: spec.column ?? DEFAULT_VERSION_COLUMN, set: spec.set, where: spec.where });
  }
  const version = BigInt(spec.version);
  if (row.matched === 0 && row.written === 0) return { applied: false, reason: 'missing' };
  if (row.written > 0 && row.written >= row.matched) return { applied: true, currentVersion: version + 1n };
  // Rows written then by others: `current` is the newest version among the rows the statement saw.
  return { applied: false, reason: 'conflict', ...(row.current === null ? {} : { currentVersion: BigInt(row.current) }) };
}

/** A version is a non-negative int64: a bigint, or a safe integer number (what an ORM's Int field reads as). */
export function checkVersion(version: unknown, argument = 'version'): bigint {
  if (typeof version === 'number') {
    if (!Number.isSafeInteger(version)) throw new InvalidArgumentError(argument, `expected an integer version, got ${version}`);
    version = BigInt(version);
  }
  if (typeof version !== 'bigint') throw new InvalidArgumentError(argument, `expected a bigint (or integer) version, got ${describeType(version)}`);
  if (version < 0n || version >= 2n ** 63n - 1n) throw new InvalidArgumentError(argument, `a version is an int64 from 0 below its maximum, got ${version}`);
  return version;
}

