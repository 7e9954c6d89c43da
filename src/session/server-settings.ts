import type pg from 'pg';
import type { Logger } from '../observe/index.js';
import { ADVISORY_LOCKS_ROW, applySettingsAndReadSql, applySettingsSql, LOCK_TABLE_ROW } from './session-sql.js';

/**
 * Server-side dead-client detection and timeouts for pinned connections (sessions, the waiter
 * session, the listener).
 *
 * Without it a partitioned client's backend, and every lock it holds, stays on the server until TCP
 * gives up (the kernel's default keepalive idle is two hours). With it the server aborts the
 * connection once it has heard nothing from the client for `tcp_user_timeout`, which is chosen to
 * pass only after the holder's own keepalive has failed and aborted its handles' signals:
 *
 *   client loss bound  C = keepaliveMs + deadlineMs + 2 * tick      (tick = max(10, keepaliveMs / 4))
 *   tcp_user_timeout   U = C + max(1000, keepaliveMs / 2)           (the margin: timers late under load)
 *   server frees locks within U + tcp_keepalives_interval of the link going down.
 *
 * With the defaults (keepaliveMs 5000, deadlineMs 10000): C = 17.5 s, U = 20 s, bound 21 s.
 * With keepaliveMs 1000 (deadlineMs 2000): C = 3.5 s, U = 4.5 s, bound 5.5 s.
 *
 * A backend blocked in pg_advisory_lock does not read its socket: client_connection_check_interval
 * (PostgreSQL 14+) makes it look, so a partitioned waiter leaves the server's queue too.
 * The server timeouts that would kill an idle holder with its locks are turned off on these
 * connections only.
 */
interface DeadClientBounds {
  /** Within this time of its last answer, a holder's session is declared lost and its signals abort. */
  clientLossMs: number;
  tcpUserTimeoutMs: number;
  keepalivesIdleS: number;
  keepalivesIntervalS: number;
  keepalivesCount: number;
  connectionCheckIntervalMs: number;
  /** Within this time of the link going down, the server has dropped the connection and its locks. */
  serverFreeMs: number;
}

export function deadClientBounds(keepaliveMs: number, deadlineMs: number): DeadClientBounds {
  const tickMs = Math.max(10, Math.min(keepaliveMs, deadlineMs) / 4);
  const clientLossMs = keepaliveMs + deadlineMs + 2 * tickMs;
  const tcpUserTimeoutMs = Math.ceil(clientLossMs + Math.max(1000, keepaliveMs / 2));
  // The server probes a silent client after one keepalive period, then every second or so (tiny packets):
  // with tcp_user_timeout set, Linux aborts at the first probe past it.
  const keepalivesIdleS = Math.max(1, Math.ceil(keepaliveMs / 1000));
  const keepalivesIntervalS = Math.max(1, Math.floor(tcpUserTimeoutMs / 10_000));
  // Where tcp_user_timeout is not supported (non-Linux servers), the probe count gives about the same bound.
  const keepalivesCount = Math.max(1, Math.ceil((tcpUserTimeoutMs / 1000 - keepalivesIdleS) / keepalivesIntervalS));
  return {
    clientLossMs,
    tcpUserTimeoutMs,
    keepalivesIdleS,
    keepalivesIntervalS,
    keepalivesCount,
    connectionCheckIntervalMs: Math.max(100, Math.min(1000, Math.round(keepaliveMs))),
    serverFreeMs: tcpUserTimeoutMs + keepalivesIntervalS * 1000,
  };
}

/** The settings, in the order they are applied; a server that lacks one (older version) skips it. */
function pinnedSessionSettings(bounds: DeadClientBounds): [name: string, value: string][] {
  return [
    ['tcp_keepalives_idle', String(bounds.keepalivesIdleS)],
    ['tcp_keepalives_interval', String(bounds.keepalivesIntervalS)],
    ['tcp_keepalives_count', String(bounds.keepalivesCount)],
    ['tcp_user_timeout', String(bounds.tcpUserTimeoutMs)], // PostgreSQL 12+
    ['client_connection_check_interval', String(bounds.connectionCheckIntervalMs)], // 14+
    ['idle_session_timeout', '0'], // 14+
    ['idle_in_transaction_session_timeout', '0'],
    ['transaction_timeout', '0'], // 17+
  ];
}

/** Applies the pinned-session settings to new connections; tells the logger once about what the server lacks or refuses. */
export class PinnedSessionSettings {
  private readonly settings: [string, string][];
  /** Settings a server refused (managed services may): skipped on later connections. */
  private readonly refused = new Set<string>();
  private reportedMissing = false;
  /**
   * Told the server's lock table size once, with the first connection's settings (no extra round trip),
   * and the server's advisory locks then (locks, backends holding some, other client backends).
   */
  onLockTable: ((size: number, advisory: { locks: number; holders: number; clients: number } | null) => void) | null = null;

  constructor(
    bounds: DeadClientBounds,
    private readonly logger: Logger,
  ) {
    this.settings = pinnedSessionSettings(bounds);
  }

  /** Sets what the server allows; a failure of one setting is logged (once) and never fails the connection. */
  async apply(client: pg.ClientBase): Promise<void> {
    const wanted = this.settings.filter(([name]) => !this.refused.has(name));
    const readLockTable = this.onLockTable !== null;
    if (wanted.length === 0 && !readLockTable) return;
    try {
      const { rows } = await client.query<{ name: string; value: string }>(readLockTable ? applySettingsAndReadSql : applySettingsSql, [
        wanted.map(([n]) => n),
        wanted.map(([, v]) => v),
      ]);
      this.reportMissing(wanted, new Set(rows.map((r) => r.name)));
      this.tellLockTable(rows);
      return;
    } catch (err) {
      if (!isStatementError(err)) throw err;
    }
    // One of them was refused: find which, one statement each (only the first time on such a server).
    const applied = new Set<string>();
    for (const [name, value] of wanted) {
      try {
        const { rows } = await client.query<{ name: string }>(applySettingsSql, [[name], [value]]);
        if (rows.length > 0) applied.add(name);
      } catch (err) {
        if (!isStatementError(err)) throw err;
        this.refused.add(name);
        this.logger.info({ setting: name, err: (err as Error).message }, 'pgfence: the server refused a pinned-session setting; carrying on without it');
      }
    }
    this.reportMissing(wanted.filter(([n]) => !this.refused.has(n)), applied);
    if (this.onLockTable) this.tellLockTable((await client.query<{ name: string; value: string }>(applySettingsAndReadSql, [[], []])).rows);
  }

  private tellLockTable(rows: { name: string; value: string }[]): void {
    const table = rows.find((r) => r.name === LOCK_TABLE_ROW);
    if (!table || !this.onLockTable) return;
    const tell = this.onLockTable;
    this.onLockTable = null;
    const [locks, holders, clients] = (rows.find((r) => r.name === ADVISORY_LOCKS_ROW)?.value ?? '').split(',').map(Number);
    const known = [locks, holders, clients].every((n) => Number.isFinite(n));
    tell(Number(table.value), known ? { locks: locks!, holders: holders!, clients: clients! } : null);
  }

  /**
   * Once: what an older server lacks. A timeout it lacks is one that cannot kill a holder (nothing to
   * turn off: debug); lacking a detection setting weakens the dead-client bounds, which matters (info).
   */
  private reportMissing(wanted: [string, string][], applied: Set<string>): void {
    if (this.reportedMissing) return;
    const missing = wanted.filter(([n]) => !applied.has(n));
    if (missing.length === 0) return;
    this.reportedMissing = true;
    const weaker = missing.filter(([, value]) => value !== '0').map(([n]) => n);
    const off = missing.filter(([, value]) => value === '0').map(([n]) => n);
    if (weaker.length > 0) {
      this.logger.info({ settings: weaker }, 'pgfence: this PostgreSQL lacks some dead-client detection settings (older version): a partitioned holder is dropped later than documented');
    }
    if (off.length > 0) this.logger.debug({ settings: off }, 'pgfence: this PostgreSQL lacks some timeouts (older version): none to turn off on pinned sessions');
  }
}

/** An error the server sent for one statement (the connection is still usable). */
function isStatementError(err: unknown): boolean {
  const e = err as { severity?: unknown; code?: unknown };
  return typeof e?.severity === 'string' && e.severity === 'ERROR' && typeof e.code === 'string' && !e.code.startsWith('08');
}
