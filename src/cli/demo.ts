/** pgfence demo (not written yet). */
export async function run(_argv: string[]): Promise<number> {
  process.stderr.write('pgfence demo: not available yet\n');
  return 69;
}
