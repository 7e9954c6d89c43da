/** The logger shape pgfence writes to: pino's and console's both fit. */
export interface Logger {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

const noop = () => {};
export const silentLogger: Logger = { debug: noop, info: noop, warn: noop, error: noop };

const LEVELS = ['debug', 'info', 'warn', 'error'] as const;

/**
 * The caller's logger, given log objects in which every bigint (keys and tokens, also inside an
 * error such as `err.key`) is a decimal string: JSON loggers either throw on a bigint or, like
 * pino's serialiser, write it as a JSON number, which readers parse as a double and round.
 */
export function jsonSafeLogger(logger: Logger): Logger {
  const out = {} as Logger;
  for (const level of LEVELS) out[level] = (obj, msg) => logger[level](jsonSafe(obj, 0) as object, msg);
  return out;
}

/** A copy of `value` with bigints as strings; errors stay errors (same class, for `err.type`), copied. */
function jsonSafe(value: unknown, depth: number): unknown {
  if (typeof value === 'bigint') return value.toString();
  if (value === null || typeof value !== 'object' || depth > 4) return value;
  if (value instanceof Error) {
    const copy = Object.create(Object.getPrototypeOf(value) as object) as Error;
    for (const [k, d] of Object.entries(Object.getOwnPropertyDescriptors(value))) {
      // Node 24's `stack` is an own accessor that answers only on the error it was made for: copy its value.
      const v: unknown = 'value' in d ? d.value : (value as unknown as Record<string, unknown>)[k];
      Object.defineProperty(copy, k, { value: jsonSafe(v, depth + 1), writable: true, configurable: true, enumerable: d.enumerable ?? false });
    }
    return copy;
  }
  if (Array.isArray(value)) return value.map((v) => jsonSafe(v, depth + 1));
  const proto = Object.getPrototypeOf(value) as unknown;
  if (proto !== Object.prototype && proto !== null) return value; // dates, buffers, class instances
  const copy: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) copy[k] = jsonSafe(v, depth + 1);
  return copy;
}
