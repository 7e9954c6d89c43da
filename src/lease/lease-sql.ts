/**
 * The SQL of leases: calls of the functions in sql/leases.sql, the same ones the SQL interface's
 * try_lease / renew_lease / release_lease call, so that a rule (expiry, at-least-for holds, who may
 * renew or release, whom a release wakes) is written once. Taking a lease issues the fencing token in
 * the same transaction; renewal and release only touch the holder's own row, matched by token, so a
 * holder that lost its lease changes nothing. One statement each: one round trip.
 */

/** $1 key, $2 name, $3 owner, $4 ttl ms, $5 data (jsonb), $6 min hold ms (kept however the holder ends). */
export const acquireLeaseSql = `SELECT granted, token::text AS token, owner, acquired_at, expires_at, remaining_ms::int8::float8 AS remaining_ms
FROM pgfence.lease_acquire($1::int8, $2::text, $3::text, $4::int8, $5::jsonb, $6::int8)`;

/**
 * For a waiter that found the name held by a lock (not a lease): waits in PostgreSQL's queue for the key
 * (pgfence.queue_for_key, FIFO with the lockers) up to $7 ms (NULL: no bound), then takes the lease as
 * acquireLeaseSql does ($1..$6 as there), in the same transaction. Run on the locker's waiter session (it
 * blocks). `waited_ms`: how long after the statement began the lease was granted (the wait in the queue),
 * on the server's clock: the holder counts its deadline from when it sent the statement plus this, never
 * from when the answer arrived (an answer held up on the way would stretch the deadline past expires_at).
 */
export const acquireQueuedLeaseSql = `SELECT granted, token::text AS token, owner, acquired_at, expires_at, remaining_ms::int8::float8 AS remaining_ms,
       greatest(0, extract(epoch FROM acquired_at - statement_timestamp()) * 1000)::float8 AS waited_ms
FROM pgfence.lease_acquire_queued($1::int8, $2::text, $3::text, $4::int8, $5::jsonb, $6::int8, $7::int8)`;

/** $1 key, $2 token, $3 ttl ms. The new expiry, or NULL and whether another holder took the lease. */
export const renewLeaseSql = `SELECT expires_at, taken_over FROM pgfence.lease_renew($1::int8, $2::int8, $3::int8)`;

/**
 * $1 key, $2 token, $3 min hold ms. Marks the lease released (the row stays: tokens never restart);
 * a hold (at-least-for) keeps the name until it ends. Wakes other sessions' waiters only when the name
 * is free now; its commit stays durable (the UPDATE).
 */
export const releaseLeaseSql = `SELECT pgfence.lease_release($1::int8, $2::int8, $3::int8) AS released`;

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
