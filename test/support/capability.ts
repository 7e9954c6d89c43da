/**
 * A test file that needs something the machine may lack (PgBouncer, root and network namespaces, the
 * server binaries to start a private cluster or a replica): `reason` says what is missing, or is null.
 * Under PGFENCE_REQUIRE_TOPOLOGY_TESTS=1 (CI) a missing capability fails the file; elsewhere the file
 * says so and its tests skip. `needs` says what the tests need, for the message. Returns whether they skip.
 */
export function capabilityMissing(tests: string, reason: string | null, needs?: string): boolean {
  if (reason === null) return false;
  const line = `[pgfence tests] ${tests} SKIPPED: ${reason}${needs ? ` (${needs})` : ''}`;
  if (process.env.PGFENCE_REQUIRE_TOPOLOGY_TESTS === '1') throw new Error(line);
  console.warn(line);
  return true;
}
