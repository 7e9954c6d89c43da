// Array parameters as PostgreSQL's array text, written by pgfence itself (node-postgres converts a JS array
// element by element, with two regular expressions each: more than the statement costs for thousands).

/** An array parameter of integers as PostgreSQL's array text. */
export function intArray<T>(items: readonly T[], value: (item: T) => number | bigint): string {
  return `{${items.map(value).join(',')}}`;
}

/** A text array parameter as PostgreSQL's array text (see intArray): each element quoted, `"` and `\` escaped; null as NULL. */
export function textArray<T>(items: readonly T[], value: (item: T) => string | null): string {
  return `{${items.map((item) => {
    const text = value(item);
    return text === null ? 'NULL' : `"${text.replace(/["\\]/g, '\\$&')}"`;
  }).join(',')}}`;
}
