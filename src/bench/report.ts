/** The bench's table rows for the usual shapes of comparison, and the table itself. */

import { table } from '../core/index.js';
import type { BenchContext, Row } from './context.js';
import { fmt, median, type Spread } from './stats.js';

interface Target {
  text: string;
  met: (ratio: number) => boolean;
}

/** pgfence over baseline, higher is better (rates). */
export const atLeast = (x: number): Target => ({ text: `>= ${x.toFixed(2)}x`, met: (r) => r >= x });
/** pgfence over baseline, lower is better (times, costs). */
export const atMost = (x: number): Target => ({ text: `<= ${x.toFixed(2)}x`, met: (r) => r <= x });

/** CPU µs per operation of each side (every round's or sample's): the columns show their medians. */
export interface CpuPair {
  pgfence: readonly number[];
  baseline: readonly number[];
}

export const cpuColumns = (cpu?: CpuPair) => (cpu ? { cpu: fmt.cpu(median(cpu.pgfence)), baselineCpu: fmt.cpu(median(cpu.baseline)) } : {});

/** A rate comparison: medians of each side, the median of per-round ratios and their min..max. */
export function rateRow(ctx: BenchContext, measurement: string, pgfence: number, baseline: number, ratio: Spread, target?: Target, cpu?: CpuPair): void {
  ctx.row({
    measurement,
    pgfence: fmt.rate(pgfence),
    baseline: fmt.rate(baseline),
    ratio: fmt.ratio(ratio.median),
    range: fmt.range(ratio),
    ...(target ? { target: target.text, met: target.met(ratio.median) } : {}),
    ...cpuColumns(cpu),
  });
}

/** A time comparison (lower is better): median times of each side, ratio pgfence / baseline. */
export function timeRow(ctx: BenchContext, measurement: string, pgfence: Spread, baseline: Spread, ratio: Spread, target?: Target, cpu?: CpuPair): void {
  ctx.row({
    measurement,
    pgfence: fmt.ms(pgfence.median),
    baseline: fmt.ms(baseline.median),
    ratio: fmt.ratio(ratio.median),
    range: fmt.range(ratio),
    ...(target ? { target: target.text, met: target.met(ratio.median) } : {}),
    ...cpuColumns(cpu),
  });
}

const verdict = (met: boolean | null) => (met === null ? '' : met ? 'yes' : 'NO');

export function renderTable(rows: readonly Row[]): string {
  return table(
    ['measurement', 'pgfence', 'baseline', 'ratio', 'min..max', 'target', 'met', 'CPU µs/op', 'baseline CPU'],
    rows.map((r) => [r.measurement, r.pgfence, r.baseline, r.ratio, r.range, r.target, verdict(r.met), r.cpu, r.baselineCpu]),
    { alignRight: [1, 2, 3, 4, 5, 7, 8] },
  );
}
