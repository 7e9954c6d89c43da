/**
 * The SQL the session area sends of its own: keepalive probes, the pinned-session settings, pooler and
 * host detection, LISTEN, a cancel. The statements a session runs for its owner's operations are the
 * owner's (OpStatements); these know no lock kind.
 */

/** Sent as a simple query (no Parse, ever): a probe may fall among any statements, and costs them nothing to count. */
export const keepaliveProbeSql = { text: 'SELECT 1' };

/** The channel releases NOTIFY when someone waits (the payload is the key); the listener LISTENs on it. */
export const NOTIFY_CHANNEL = 'pgfence_release';

/** The release listener, on the home session. */
export const listenSql = `LISTEN ${NOTIFY_CHANNEL}`;

/** Interrupts a blocking wait from another connection; $1 the waiting backend's pid. */
export const cancelBackendSql = 'SELECT pg_cancel_backend($1)';

/** The backend a connection reaches (a proxy reports a pid of its own when the connection starts). */
export const backendPidSql = 'SELECT pg_backend_pid() AS pid';

/**
 * One pooler-detection probe: the backend that ran it, the probe mark its session carried (set by an earlier
 * probe on that backend, or null), and the mark it leaves ($1). The target list is evaluated in order, so
 * `seen` is read before the new mark is set.
 */
export const pinningProbeSql = `SELECT pg_backend_pid() AS pid, current_setting('pgfence.pinning_probe', true) AS seen,
  set_config('pgfence.pinning_probe', $1, false) AS mark`;

/** What a host is: a standby, read-only (multi-host connection strings). */
export const hostRoleSql = `SELECT pg_is_in_recovery() AS standby, current_setting('transaction_read_only') AS ro`;

/**
 * The size of the server's shared lock table, an int8 expression: max_locks_per_transaction x
 * (max_connections + max_prepared_transactions) entries. Defined once: the lock budget's first sample and
 * the bench read it.
 */
export const lockTableSizeSql = `(current_setting('max_locks_per_transaction')::int8
    * (current_setting('max_connections')::int8 + current_setting('max_prepared_transactions')::int8))`;

/** The row of applySettingsAndReadSql's answer that carries lockTableSizeSql. */
export const LOCK_TABLE_ROW = 'pgfence.lock_table_size';
/**
 * The row carrying the server's advisory locks, the backends holding some, and the other client backends,
 * as "locks,holders,clients" (the lock-table guard's first sample).
 */
export const ADVISORY_LOCKS_ROW = 'pgfence.advisory_locks';

/**
 * The pinned-session settings ($1 names, $2 values): only those the server knows are set (unknown names
 * are skipped inside the statement), so one round trip per new connection serves every version. Unnamed
 * statement: works through poolers.
 */
export const applySettingsSql = `SELECT v.name, set_config(v.name, v.value, false) AS value
  FROM unnest($1::text[], $2::text[]) AS v(name, value)
  WHERE current_setting(v.name, true) IS NOT NULL`;

/** The same statement, also reading the size of the server's shared lock table and its advisory locks (for the lock budget). */
export const applySettingsAndReadSql = `${applySettingsSql}
  UNION ALL
  SELECT '${LOCK_TABLE_ROW}', ${lockTableSizeSql}::text
  UNION ALL
  SELECT '${ADVISORY_LOCKS_ROW}', count(*) || ',' || count(DISTINCT pid)
    || ',' || (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid())
  FROM pg_locks WHERE locktype = 'advisory'`;
