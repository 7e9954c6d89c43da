/** A plain text table: a header, a rule, rows; columns padded to their widest cell (the CLI's status, the bench's report). */
export function table(header: string[], rows: string[][], opts: { alignRight?: number[] } = {}): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const right = new Set(opts.alignRight ?? []);
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (right.has(i) ? c.padStart(widths[i]!) : i === cells.length - 1 ? c : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}
