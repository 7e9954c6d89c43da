/** pgfence status (not written yet). */
export async function run(_argv: string[]): Promise<number> {
  process.stderr.write('pgfence status: not available yet\n');
  return 69;
}
