-- The name registry: lock names for inspect() and `pgfence status`. Re-applied by migrate() whenever
-- this file changes.

-- Writes the names of keys (once per name per process, batched: src/observe/name-registry.ts). It runs
-- on the locker's home session between its lock operations, so a write held up by another transaction
-- (a lock on the table, a concurrent insert of the same key) must not hold them up: it waits for a lock
-- at most 50 ms and fails (55P03; the locker tries again later). Names are best effort: committed
-- asynchronously, since a durable commit would hold up the statements queued behind it too.
CREATE OR REPLACE FUNCTION pgfence.note_lock_names(p_keys bigint[], p_names text[], p_namespaces text[])
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM set_config('lock_timeout', '50ms', true);
  PERFORM set_config('synchronous_commit', 'off', true);
  INSERT INTO pgfence.lock_names (key, name, namespace)
  SELECT n.key, n.name, n.namespace FROM unnest(p_keys, p_names, p_namespaces) AS n(key, name, namespace)
  ON CONFLICT (key) DO NOTHING;
END $$;
