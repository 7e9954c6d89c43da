/**
 * JSON with bigints (keys and tokens) as decimal strings: JSON.stringify throws on a bigint, and
 * JSON serialisers that write one as a number lose digits in every reader that parses doubles.
 */

/** JSON.stringify's replacer (and a value's own toJSON): a bigint becomes its decimal string. */
export function bigintAsString(_key: string, value: unknown): unknown {
  return typeof value === 'bigint' ? value.toString() : value;
}

/** JSON text with bigints as decimal strings (dates become ISO strings through their toJSON). */
export function toJson(value: unknown, indent?: number): string {
  return JSON.stringify(value, bigintAsString, indent);
}

/**
 * `value` as JSON.stringify accepts it, for consumers that serialise it themselves and throw on a
 * bigint (pg-boss): itself when it already serialises; else its JSON round trip with bigints as
 * strings; else (a cycle) its String().
 */
export function jsonCompatible(value: unknown): unknown {
  if (typeof value === 'bigint') return value.toString();
  if (typeof value !== 'object' || value === null) return value;
  try {
    JSON.stringify(value);
    return value;
  } catch {
    try {
      return JSON.parse(toJson(value));
    } catch {
      return String(value);
    }
  }
}

/**
 * A copy of `value` with every bigint as a decimal string, for consumers that serialise it later
 * themselves (loggers). Errors stay errors (same class, for `err.type`), copied with every own
 * property; arrays and plain objects are copied; other objects (dates, buffers, class instances) and
 * anything deeper than 5 levels are kept as they are.
 */
export function withBigintsAsStrings(value: unknown, depth = 0): unknown {
  if (typeof value === 'bigint') return value.toString();
  if (value === null || typeof value !== 'object' || depth > 4) return value;
  if (value instanceof Error) {
    const copy = Object.create(Object.getPrototypeOf(value) as object) as Error;
    for (const [k, d] of Object.entries(Object.getOwnPropertyDescriptors(value))) {
      // Node 24's `stack` is an own accessor that answers only on the error it was made for: copy its value.
      const v: unknown = 'value' in d ? d.value : (value as unknown as Record<string, unknown>)[k];
      Object.defineProperty(copy, k, { value: withBigintsAsStrings(v, depth + 1), writable: true, configurable: true, enumerable: d.enumerable ?? false });
    }
    return copy;
  }
  if (Array.isArray(value)) return value.map((v) => withBigintsAsStrings(v, depth + 1));
  const proto = Object.getPrototypeOf(value) as unknown;
  if (proto !== Object.prototype && proto !== null) return value;
  const copy: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) copy[k] = withBigintsAsStrings(v, depth + 1);
  return copy;
}
