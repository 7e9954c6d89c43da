/**
 * Issuing fencing tokens, for every kind of lock: session locks (plain, batched and blocking),
 * transaction locks, and leases (pgfence.lease_acquire, sql/leases.sql, calls the same function).
 * pgfence.next_token (sql/fencing.sql) draws the next value of the token sequence (a rollback does
 * not undo it), records it as the key's last token and makes the transaction's commit durable, so a
 * token is never handed out twice, even after a rollback or a crash.
 */

/** The SQL expression that issues the next fencing token of key `k` (an int8 SQL expression). */
export const nextTokenExpr = (k: string): string => `pgfence.next_token(${k})`;
