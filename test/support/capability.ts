/**
 * Tests that need something a machine may lack (root, network namespaces, PgBouncer, the clients of
 * other languages): where it is missing they are skipped with a warning, except when
 * PGFENCE_REQUIRE_TOPOLOGY_TESTS=1 (CI), where the file fails instead: never a silent skip there.
 */
export function skipWhenUnavailable(tests: string, unavailable: string | null): boolean {
  if (unavailable === null) return false;
  const line = `[pgfence tests] ${tests} SKIPPED: ${unavailable}`;
  if (process.env.PGFENCE_REQUIRE_TOPOLOGY_TESTS === '1') throw new Error(line);
  console.warn(line);
  return true;
}
