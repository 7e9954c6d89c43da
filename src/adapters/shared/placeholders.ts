/**
 * pgfence writes its statements with PostgreSQL's numbered placeholders ($1, $2, … a number may repeat).
 * Libraries that bind values themselves (Knex's `?`, Drizzle's sql`` template) take them in order of
 * appearance instead: this splits a statement into the text between placeholders and the value of each
 * placeholder in order, as a tagged template would receive them (strings.length = values.length + 1).
 */
export interface SplitStatement {
  strings: string[];
  values: unknown[];
}

/**
 * A placeholder, or a quoted identifier or string literal to step over: `"price$2"` (a column name may
 * hold a $ and digits) and `'$1'` are text, not placeholders.
 */
const PLACEHOLDER = /"(?:[^"]|"")*"|'(?:[^']|'')*'|\$(\d+)/g;

export function splitPlaceholders(text: string, values: readonly unknown[]): SplitStatement {
  const strings: string[] = [];
  const ordered: unknown[] = [];
  let last = 0;
  for (const m of text.matchAll(PLACEHOLDER)) {
    if (m[1] === undefined) continue; // quoted: part of the text around it
    const index = Number(m[1]) - 1;
    if (index < 0 || index >= values.length) throw new RangeError(`statement refers to $${m[1]}, but ${values.length} value(s) were given`);
    strings.push(text.slice(last, m.index));
    ordered.push(values[index]);
    last = m.index! + m[0].length;
  }
  strings.push(text.slice(last));
  return { strings, values: ordered };
}
