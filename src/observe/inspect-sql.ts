/**
 * The observe area's SQL: the name registry's write, and the reads of inspect() and `pgfence status`.
 */

/**
 * The name registry's write, one statement per batch (sql/names.sql): it waits at most 50 ms for a lock
 * held by another transaction, so a blocked write never holds up the lock operations queued behind it
 * on the home session.
 */
export const INSERT_NAMES = { name: 'pgfence_note_names', text: 'SELECT pgfence.note_lock_names($1::int8[], $2::text[], $3::text[])' };

/**
 * inspect() and `pgfence status`. Advisory locks of this database, with the backend that
 * holds or waits for each: objsubid 1 are int8 keys (locks), objsubid 2 are pgfence's waiter markers
 * (a waiter announced for that key). Names come from the registry when pgfence's schema exists.
 */

const locksSelect = (withNames: boolean) => `SELECT l.pid, a.application_name, a.client_addr::text AS client_addr,
       l.objsubid::int AS space, ((l.classid::int8 << 32) | l.objid::int8)::text AS key,
       l.mode, l.granted, l.waitstart, a.xact_start, a.backend_start, a.state,
       ${withNames ? 'n.name, n.namespace' : 'NULL::text AS name, NULL::text AS namespace'}
FROM pg_locks l
LEFT JOIN pg_stat_activity a ON a.pid = l.pid
${withNames ? 'LEFT JOIN pgfence.lock_names n ON n.key = ((l.classid::int8 << 32) | l.objid::int8)' : ''}
WHERE l.locktype = 'advisory' AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
ORDER BY key, l.granted DESC, l.waitstart NULLS LAST, l.pid`;

export const locksWithNamesSql = locksSelect(true);
export const locksWithoutNamesSql = locksSelect(false);

/** Live leases by pgfence.lease_live (sql/leases.sql); expires_at is when the name becomes free (a hold included). */
export const activeLeasesSql = `SELECT l.key::text AS key, l.name, l.owner, l.token::text AS token, l.acquired_at, l.renewed_at,
       pgfence.lease_live_until(l) AS expires_at, l.data,
       ceil(extract(epoch FROM pgfence.lease_live_until(l) - clock_timestamp()) * 1000)::float8 AS remaining_ms
FROM pgfence.leases l
WHERE pgfence.lease_live(l, clock_timestamp())
ORDER BY l.name NULLS LAST, l.key`;

export const databaseClockSql = 'SELECT clock_timestamp() AS now';

/**
 * Whether commits wait for a standby: synchronous_standby_names, the standbys streaming now
 * (pg_stat_replication; other roles' rows show fewer columns without pg_read_all_stats), and the
 * server's own role and timeline (the high bits of the tokens it issues).
 */
export const replicationSql = `SELECT pg_is_in_recovery() AS standby,
       CASE WHEN NOT pg_is_in_recovery()
         THEN ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END AS timeline,
       current_setting('synchronous_standby_names') AS sync_names,
       coalesce((SELECT json_agg(json_build_object('name', r.application_name, 'clientAddr', r.client_addr::text,
                                                   'state', r.state, 'syncState', r.sync_state) ORDER BY r.application_name)
                 FROM pg_stat_replication r), '[]'::json) AS standbys`;
