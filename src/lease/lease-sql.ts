/**
 * The SQL of leases. Taking a lease is pgfence.lease_acquire (sql/leases.sql): it issues the fencing
 * token in the same transaction. Renewal and release only touch the holder's own row, matched by
 * token, so a holder that lost its lease changes nothing.
 */

/** $1 key, $2 name, $3 owner, $4 ttl ms, $5 data (jsonb). */
export const acquireLeaseSql = `SELECT granted, token::text AS token, owner, acquired_at, expires_at, remaining_ms::int8::float8 AS remaining_ms
FROM pgfence.lease_acquire($1::int8, $2::text, $3::text, $4::int8, $5::jsonb)`;

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
 * $1 key, $2 token, $3 min hold ms. pgfence.release_lease (sql/interface.sql, public): marks the lease
 * released (the row stays: tokens never restart), or with a min hold still ahead keeps it until
 * acquired_at + min hold; NOTIFYs when it frees the lease and another session has announced a waiter.
 */
export const releaseLeaseSql = `SELECT pgfence.release_lease($1::int8, $2::int8, $3::int8) AS released`;
