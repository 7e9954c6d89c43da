/** Statistics and number formats for the bench's table: medians, min..max, per-round ratios. */

/** Nearest-rank percentile (p in 0..100); NaN for no values. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = Float64Array.from(values).sort();
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))]!;
}

export const median = (values: readonly number[]): number => percentile(values, 50);

export interface Spread {
  median: number;
  min: number;
  max: number;
  n: number;
}

export function spread(values: readonly number[]): Spread {
  const finite = values.filter(Number.isFinite);
  return {
    median: median(finite),
    min: finite.length ? Math.min(...finite) : NaN,
    max: finite.length ? Math.max(...finite) : NaN,
    n: finite.length,
  };
}

/** Per-round ratios a[i] / b[i]: rounds measured next to each other, so drift in the machine's load cancels out. */
export function pairedRatios(a: readonly number[], b: readonly number[]): Spread {
  return spread(a.map((x, i) => x / b[i]!));
}

const finite = (x: number, f: (x: number) => string) => (Number.isFinite(x) ? f(x) : '-');

export const fmt = {
  rate: (x: number) => finite(x, (v) => `${Math.round(v).toLocaleString('en-US')}/s`),
  ms: (x: number) => finite(x, (v) => `${v < 1 ? v.toFixed(3) : v < 100 ? v.toFixed(2) : v.toFixed(0)} ms`),
  ratio: (x: number) => finite(x, (v) => `${v < 10 ? v.toFixed(2) : v.toFixed(1)}x`),
  /** A spread of ratios as min..max. */
  range: (s: Spread) => (s.n > 1 ? `${fmt.ratio(s.min)}..${fmt.ratio(s.max)}` : ''),
  pct: (x: number) => finite(x, (v) => `${(v * 100).toFixed(1)}%`),
  count: (x: number) => finite(x, (v) => (Number.isInteger(v) ? v.toLocaleString('en-US') : v.toFixed(2))),
  /** CPU µs per operation. */
  cpu: (x: number) => finite(x, (v) => (v < 100 ? v.toFixed(1) : Math.round(v).toLocaleString('en-US'))),
  bytes: (x: number) => finite(x, (v) => `${Math.round(v).toLocaleString('en-US')} B`),
  list: (xs: readonly number[], digits = 0) => xs.map((x) => (Number.isFinite(x) ? x.toFixed(digits) : '-')).join(', '),
};
