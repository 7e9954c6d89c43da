/**
 * The SQL of pgfence's migration runner, in one place. Only file contents from migrations/ and sql/
 * are run besides these statements; values travel as parameters.
 */

/** Each migration file runs in a transaction of its own, with its history row. */
export const beginSql = 'BEGIN';
export const commitSql = 'COMMIT';
export const rollbackSql = 'ROLLBACK';

/** Both history tables exist: a second run needs no DDL (and no CREATE privilege). */
export const historyTablesExistSql = `SELECT to_regclass('pgfence.schema_migrations') IS NOT NULL
   AND to_regclass('pgfence.schema_definitions') IS NOT NULL AS ready`;

/** pgfence's own history: versioned migrations applied once each, repeatable definitions by checksum. */
export const createHistoryTablesSql = `CREATE SCHEMA IF NOT EXISTS pgfence;

CREATE TABLE IF NOT EXISTS pgfence.schema_migrations (
  version    int         PRIMARY KEY,
  name       text        NOT NULL,
  checksum   text        NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS pgfence.schema_definitions (
  name       text        PRIMARY KEY,
  checksum   text        NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now()
)`;

export const appliedMigrationsSql = `SELECT version, name, checksum FROM pgfence.schema_migrations ORDER BY version`;

/** $1 version, $2 file name, $3 sha256 of the file. */
export const recordMigrationSql = `INSERT INTO pgfence.schema_migrations (version, name, checksum) VALUES ($1, $2, $3)`;

export const appliedDefinitionsSql = `SELECT name, checksum FROM pgfence.schema_definitions`;

/** $1 file name, $2 sha256 of the file. */
export const recordDefinitionSql = `INSERT INTO pgfence.schema_definitions (name, checksum) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET checksum = EXCLUDED.checksum, applied_at = now()`;

/**
 * Waits for the migration lock for the whole run: $1 key, $2 lock_timeout (e.g. '60000ms').
 * The timeout is local to this statement's own (implicit) transaction, so the session keeps its
 * setting; the subquery runs first, so the bound is in force when the wait starts.
 */
export const lockSessionSql = `SELECT pg_advisory_lock($1::int8) AS locked
FROM (SELECT set_config('lock_timeout', $2, true) OFFSET 0) AS wait_bound`;

/** $1 key; false when this session did not hold it. */
export const unlockSessionSql = `SELECT pg_advisory_unlock($1::int8) AS unlocked`;

/**
 * The same lock inside a caller's transaction (the Kysely path), until it ends: $1 key, $2
 * lock_timeout. The caller's lock_timeout is put back in the same statement.
 */
export const lockTransactionSql = `SELECT set_config('lock_timeout', $2, true) AS bounded,
       pg_advisory_xact_lock($1::int8) AS locked,
       set_config('lock_timeout', caller.prev, true) AS restored
FROM (SELECT current_setting('lock_timeout') AS prev OFFSET 0) AS caller`;
