import { notifyIfWaiters } from '../wait/index.js';

/**
 * The SQL of leases. Taking a lease is pgfence.lease_acquire (sql/leases.sql): it issues the fencing
 * token in the same transaction. Renewal and release only touch the holder's own row, matched by
 * token, so a holder that lost its lease changes nothing.
 */

/** $1 key, $2 name, $3 owner, $4 ttl ms, $5 data (jsonb). */
export const acquireLeaseSql = `SELECT granted, token::text AS token, owner, acquired_at, expires_at, remaining_ms::int8::float8 AS remaining_ms
FROM pgfence.lease_acquire($1::int8, $2::text, $3::text, $4::int8, $5::jsonb)`;

/**
 * For a waiter that found the name held by a lock (not a lease): waits in PostgreSQL's queue for the key
 * (pgfence.queue_for_key, FIFO with the lockers) up to $6 ms (NULL: no bound), then takes the lease as
 * acquireLeaseSql does, in the same transaction. Run on the locker's waiter session (it blocks).
 * `since_grant_ms`: how long before the answer the lease was granted (the wait came before it).
 */
export const acquireQueuedLeaseSql = `SELECT granted, token::text AS token, owner, acquired_at, expires_at, remaining_ms::int8::float8 AS remaining_ms,
       (extract(epoch FROM clock_timestamp() - acquired_at) * 1000)::float8 AS since_grant_ms
FROM pgfence.lease_acquire_queued($1::int8, $2::text, $3::text, $4::int8, $5::jsonb, $6::int8)`;

/** $1 key, $2 token, $3 ttl ms. Reports the current token when the renewal is refused. */
export const renewLeaseSql = `WITH renewed AS (
  UPDATE pgfence.leases
     SET renewed_at = clock_timestamp(), expires_at = clock_timestamp() + $3::int8 * interval '1 millisecond'
   WHERE key = $1::int8 AND token = $2::int8 AND released_at IS NULL AND expires_at > clock_timestamp()
  RETURNING expires_at
)
SELECT (SELECT expires_at FROM renewed) AS expires_at,
       (SELECT token::text FROM pgfence.leases WHERE key = $1::int8) AS current_token`;

/**
 * $1 key, $2 token, $3 min hold ms. Marks the lease released (the row stays: tokens never restart),
 * or, while acquired_at + min hold is still ahead, keeps it until then (at-least-for: its expiry
 * moves there). NOTIFYs only when it frees the lease and another session has announced a waiter
 * (notified: 0 = not freed, 1 = none waits, 3 = notified); its commit stays durable (the UPDATE).
 * The same rule as the public pgfence.release_lease (sql/interface.sql), written inline: one plain
 * statement on the Node path.
 */
export const releaseLeaseSql = `WITH released AS (
  UPDATE pgfence.leases AS l
     SET released_at = CASE WHEN l.acquired_at + n.hold > n.now_ts THEN NULL ELSE n.now_ts END,
         expires_at = CASE WHEN l.acquired_at + n.hold > n.now_ts THEN l.acquired_at + n.hold ELSE l.expires_at END
    FROM (SELECT clock_timestamp() AS now_ts, $3::int8 * interval '1 millisecond' AS hold) AS n
   WHERE l.key = $1::int8 AND l.token = $2::int8 AND l.released_at IS NULL AND l.expires_at > n.now_ts
  RETURNING l.released_at IS NOT NULL AS freed
)
SELECT r.freed IS NOT NULL AS released,
       ${notifyIfWaiters('$1::int8', { released: '(r.freed IS TRUE)', asyncCommit: false })} AS notified
FROM (SELECT 1) AS one LEFT JOIN released AS r ON true`;

/**
 * $1 slot keys, $2 semaphore name, $3 owner, $4 ttl ms, $5 first slot to try (0-based): a lease-backed
 * permit, the first free slot's lease (pgfence.permit_acquire in sql/permits.sql), or the time until
 * the soonest permit expires.
 */
export const acquirePermitSql = `SELECT granted, slot::text AS slot, token::text AS token, acquired_at, expires_at, remaining_ms::int8::float8 AS remaining_ms
FROM pgfence.permit_acquire($1::int8[], $2::text, $3::text, $4::int8, $5::int4)`;

/** The lease statements with their names: prepared once per session or direct connection (see session/short-statements.ts). */
export const leaseStatements = {
  acquire: { name: 'pgfence_lease_acquire', text: acquireLeaseSql },
  acquireQueued: { name: 'pgfence_lease_acquire_queued', text: acquireQueuedLeaseSql },
  renew: { name: 'pgfence_lease_renew', text: renewLeaseSql },
  release: { name: 'pgfence_lease_release', text: releaseLeaseSql },
  permit: { name: 'pgfence_permit_acquire', text: acquirePermitSql },
} as const;
