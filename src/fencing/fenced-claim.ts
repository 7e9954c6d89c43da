import { InvalidArgumentError, type SqlExecutor } from '../core/index.js';
import { optionKeys, optionsObject } from '../options.js';
import { guardedTarget, type GuardedCounts } from './fenced-update.js';
import { guardedWriteError } from './guarded-error.js';
import { claimSql } from './guarded-sql.js';
import { DEFAULT_FENCING_COLUMN } from './identifiers.js';

export interface FencedClaimSpec {
  /** `table` or `schema.table` (plain identifiers, case kept). */
  table: string;
  /** Equality conditions (null means IS NULL) selecting the rows; at least one. */
  where: Record<string, unknown>;
  /** The holder's fencing token. */
  token: bigint;
  /** The fencing column; default 'fencing_token'. */
  column?: string;
}

const FENCED_CLAIM_SPEC_KEYS = optionKeys<FencedClaimSpec>({ table: true, where: true, token: true, column: true });

export interface FencedClaimResult<Row = Record<string, unknown>> {
  /** True when every row the `where` matched was claimed (at least one). */
  claimed: boolean;
  /** The claimed rows as they are now (their fencing column holds `token`, a bigint): read these, not a SELECT from before. */
  rows: Row[];
  /** Rows matched but not claimed because a newer token has claimed or written them. */
  refused: number;
  /** Why not claimed: a newer token holds (some of) the rows ('stale'), or no row matched ('missing'). */
  reason?: 'stale' | 'missing';
  /** The newest token among the refused rows. */
  currentToken?: bigint;
}

/** Names of the bookkeeping columns added to each returned row (and removed before the caller sees it). */
const META = { written: '__pgfence_written', matched: '__pgfence_matched', current: '__pgfence_current' } as const;

/**
 * Claims rows for a fencing token before they are read: one UPDATE stamps the token into the fencing
 * column where the row's token is not newer (`IS NULL OR <= $token`) and returns the rows. From then on
 * an older holder's guarded writes to these rows are refused, even if it read them first; and a newer
 * holder's claim takes them over. Inside a transaction the claimed rows stay locked until it ends.
 */
function fencedClaimQuery(spec: FencedClaimSpec): { text: string; values: unknown[] } {
  if (typeof spec === 'object' && spec !== null && (spec as { set?: unknown }).set !== undefined) {
    throw new InvalidArgumentError('set', 'fencedClaim writes only the fencing token; write columns afterwards with fencedUpdate');
  }
  const s = optionsObject<FencedClaimSpec>(spec, 'fencedClaim spec', FENCED_CLAIM_SPEC_KEYS);
  const t = guardedTarget(s);
  return { text: claimSql(t, META), values: t.values };
}

/** Runs a claim (fencedClaim of either driver): validates the spec, then one statement. */
export async function fencedClaimWith<Row>(db: SqlExecutor, spec: FencedClaimSpec): Promise<FencedClaimResult<Row>> {
  const { text, values } = fencedClaimQuery(spec);
  let rows: Record<string, unknown>[];
  try {
    rows = await db.query<Record<string, unknown>>(text, values);
  } catch (err) {
    throw guardedWriteError(err, { call: 'fencedClaim', ...spec });
  }
  return fencedClaimResult<Row>(rows, spec.column ?? DEFAULT_FENCING_COLUMN, spec.token);
}

/** The claim's rows and counts; each claimed row's fencing column is `token` (a bigint, as tokens are everywhere). */
function fencedClaimResult<Row>(rows: Record<string, unknown>[], column: string, token: bigint): FencedClaimResult<Row> {
  const first = rows[0]!;
  const counts: GuardedCounts = {
    written: first[META.written] as number,
    matched: first[META.matched] as number,
    current: first[META.current] as string | null,
  };
  const claimedRows =
    counts.written === 0
      ? []
      : rows.map((row) => {
          const { [META.written]: _w, [META.matched]: _m, [META.current]: _c, ...rest } = row;
          // The claim wrote the token there; the driver would hand an int8 back as a string.
          return { ...rest, [column]: token } as Row;
        });
  const refused = Math.max(0, counts.matched - counts.written);
  if (counts.matched === 0 && counts.written === 0) return { claimed: false, rows: [], refused: 0, reason: 'missing' };
  if (refused === 0) return { claimed: true, rows: claimedRows, refused: 0 };
  return {
    claimed: false,
    rows: claimedRows,
    refused,
    reason: 'stale',
    ...(counts.current === null ? {} : { currentToken: BigInt(counts.current) }),
  };
}
