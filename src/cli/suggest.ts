/** "Did you mean": the closest candidate to a mistyped word, as git and gh suggest one. */

/** The candidate within a small edit distance of `word` (or the one it uniquely starts), if any. */
function closest(word: string, candidates: readonly string[]): string | undefined {
  const w = word.toLowerCase();
  const prefixed = candidates.filter((c) => w.length >= 2 && c.startsWith(w));
  if (prefixed.length === 1) return prefixed[0];
  const limit = Math.max(1, Math.min(2, Math.floor(w.length / 3)));
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const c of candidates) {
    const d = distance(w, c.toLowerCase());
    if (d <= limit && d < bestDistance) {
      best = c;
      bestDistance = d;
    }
  }
  return best;
}

/** `; did you mean "x"?` or nothing. */
export function didYouMean(word: string, candidates: readonly string[], show: (c: string) => string = (c) => c): string {
  const c = closest(word, candidates);
  return c === undefined ? '' : `; did you mean ${show(c)}?`;
}

/** Optimal string alignment distance (Levenshtein with transpositions: "stauts" is one edit from "status"). */
function distance(a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0]![j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      d[i]![j] = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d[i]![j] = Math.min(d[i]![j]!, d[i - 2]![j - 2]! + 1);
    }
  }
  return d[a.length]![b.length]!;
}
