import { isSchemaMissing, type LockMode, type SqlExecutor } from '../core/index.js';
import { activeLeasesSql, databaseClockSql, locksWithNamesSql, locksWithoutNamesSql, replicationSql } from './inspect-sql.js';

/** One advisory lock held or awaited by some backend of the database. */
export interface LockEntry {
  key: bigint;
  /** From the name registry (null for explicit keys, pgfence internals, or before migrate()). */
  name: string | null;
  namespace: string | null;
  /** null for an announced waiter: its marker does not say which mode it wants. */
  mode: LockMode | null;
  state: 'held' | 'waiting';
  /** 'blocked' in PostgreSQL's own queue, or 'announced' by a pgfence marker (it waits for a NOTIFY). */
  waitKind: 'blocked' | 'announced' | null;
  pid: number;
  applicationName: string | null;
  clientAddr: string | null;
  /** The best known start, and what it is: see `sinceIs`. */
  since: Date | null;
  /**
   * 'granted' (this locker's own locks: the grant), 'waiting' (a blocked wait: when it began),
   * 'transaction' (the holder's open transaction: a lower bound), 'session' (the holder's connection: a lower bound).
   */
  sinceIs: 'granted' | 'waiting' | 'transaction' | 'session' | null;
  /** Held by this locker. */
  mine: boolean;
}

/** A lease that is held now. */
export interface LeaseEntry {
  key: bigint;
  name: string | null;
  owner: string;
  token: bigint;
  acquiredAt: Date;
  renewedAt: Date;
  /** When the name becomes free unless the holder renews (an at-least-for hold included). */
  expiresAt: Date;
  /** Time left on the database clock. */
  remainingMs: number;
  data: unknown;
}

/** A standby streaming from the server (pg_stat_replication). */
export interface StandbyEntry {
  name: string | null;
  clientAddr: string | null;
  /** 'streaming', 'catchup', ... (null without the right to see it). */
  state: string | null;
  /** 'async', 'sync', 'quorum' or 'potential' (null without the right to see it). */
  syncState: string | null;
}

/** What a failover can lose: with asynchronous replication, the last commits (tokens, lease rows). */
export interface ReplicationReport {
  /** The server is itself a standby (in recovery): pgfence cannot lock or issue tokens there. */
  standby: boolean;
  /** The server's timeline (it rises on every promotion; tokens carry it in their high bits); null on a standby. */
  timeline: number | null;
  /** synchronous_standby_names as set ('' when commits wait for no standby). */
  synchronousStandbyNames: string;
  standbys: StandbyEntry[];
  /** Commits wait for a standby now: synchronous_standby_names is set and a 'sync' or 'quorum' standby is streaming. */
  synchronous: boolean;
}

export interface LockReport {
  /** The database clock when the report was taken. */
  at: Date;
  locks: LockEntry[];
  leases: LeaseEntry[];
  replication: ReplicationReport;
  /** False when pgfence's schema is missing: no names, no leases (run migrate()). */
  schema: boolean;
  /**
   * How the report's connection reaches PostgreSQL, when it was checked (pgfence status does):
   * 'direct', or through a pooler that keeps one backend per client ('session-pooled') or shares
   * them ('transaction-pooled': session locks are refused there).
   */
  connection?: 'direct' | 'session-pooled' | 'transaction-pooled';
}

interface LockRow {
  pid: number;
  application_name: string | null;
  client_addr: string | null;
  space: number;
  key: string;
  mode: string;
  granted: boolean;
  waitstart: Date | null;
  xact_start: Date | null;
  backend_start: Date | null;
  state: string | null;
  name: string | null;
  namespace: string | null;
}

/** What this locker knows of its own locks: `${pid}:${key}` -> when granted. */
export type OwnLocks = Map<string, Date>;

/**
 * Reads pg_locks and pg_stat_activity (every backend of the database, not only pgfence's) and the
 * lease table, and resolves names through the registry.
 */
export async function inspectDatabase(db: Pick<SqlExecutor, 'query'>, own: OwnLocks = new Map()): Promise<LockReport> {
  const at = (await db.query<{ now: Date }>(databaseClockSql, []))[0]!.now;
  let schema = true;
  let rows: LockRow[];
  try {
    rows = await db.query<LockRow>(locksWithNamesSql, []);
  } catch (err) {
    if (!isSchemaMissing(err)) throw err;
    schema = false;
    rows = await db.query<LockRow>(locksWithoutNamesSql, []);
  }
  const locks = rows
    // An exclusive marker hold is a release probing for waiters, over within its statement.
    .filter((r) => !(r.space === 2 && r.mode === 'ExclusiveLock'))
    .map((r) => toEntry(r, own));
  let leases: LeaseEntry[] = [];
  if (schema) {
    const leaseRows = await db.query<{
      key: string;
      name: string | null;
      owner: string;
      token: string;
      acquired_at: Date;
      renewed_at: Date;
      expires_at: Date;
      data: unknown;
      remaining_ms: number;
    }>(activeLeasesSql, []);
    leases = leaseRows.map((r) => ({
      key: BigInt(r.key),
      name: r.name,
      owner: r.owner,
      token: BigInt(r.token),
      acquiredAt: r.acquired_at,
      renewedAt: r.renewed_at,
      expiresAt: r.expires_at,
      remainingMs: r.remaining_ms,
      data: r.data,
    }));
  }
  const replication = await inspectReplication(db);
  return { at, locks, leases, replication, schema };
}

async function inspectReplication(db: Pick<SqlExecutor, 'query'>): Promise<ReplicationReport> {
  const rows = await db.query<{ standby: boolean; timeline: number | null; sync_names: string; standbys: StandbyEntry[] }>(replicationSql, []);
  const r = rows[0]!;
  const synchronous =
    r.sync_names.trim() !== '' && r.standbys.some((s) => s.state === 'streaming' && (s.syncState === 'sync' || s.syncState === 'quorum'));
  return { standby: r.standby, timeline: r.timeline, synchronousStandbyNames: r.sync_names, standbys: r.standbys, synchronous };
}

function toEntry(r: LockRow, own: OwnLocks): LockEntry {
  const key = BigInt(r.key);
  const marker = r.space === 2;
  const granted = r.granted && !marker;
  const ownSince = granted ? own.get(`${r.pid}:${r.key}`) : undefined;
  let since: Date | null = null;
  let sinceIs: LockEntry['sinceIs'] = null;
  if (ownSince) [since, sinceIs] = [ownSince, 'granted'];
  else if (!r.granted && r.waitstart) [since, sinceIs] = [r.waitstart, 'waiting'];
  else if (granted && r.xact_start && r.state !== 'idle') [since, sinceIs] = [r.xact_start, 'transaction'];
  else if (granted && r.backend_start) [since, sinceIs] = [r.backend_start, 'session'];
  return {
    key,
    name: r.name,
    namespace: r.namespace,
    mode: marker ? null : r.mode === 'ShareLock' ? 'shared' : 'exclusive',
    state: granted ? 'held' : 'waiting',
    waitKind: granted ? null : marker ? 'announced' : 'blocked',
    pid: r.pid,
    applicationName: r.application_name,
    clientAddr: r.client_addr,
    since,
    sinceIs,
    mine: ownSince !== undefined,
  };
}
