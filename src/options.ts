import { describeType, InvalidArgumentError } from './core/index.js';

/** Checks every argument before any I/O: each failure names the argument and what it accepts. */

/**
 * The option names one call accepts, listed next to its options interface. Built from a record with
 * every key of T (optional ones too), so the compiler flags a list that misses or invents an option.
 */
type OptionKeys<T> = readonly (keyof T & string)[];
export function optionKeys<T extends object>(keys: { readonly [K in keyof Required<T>]: true }): OptionKeys<T> {
  return Object.freeze(Object.keys(keys)) as OptionKeys<T>;
}

/**
 * An options object: undefined (no options) or a plain object whose own keys are all in `known`. An
 * unknown key (a typo such as `timeout:`) is refused, naming the closest valid one: ignoring it would
 * silently drop what the caller asked for.
 */
export function optionsObject<T extends object>(value: unknown, argument: string, known: OptionKeys<T>): Partial<T> {
  if (value === undefined) return {};
  objectOption(value, argument);
  // for-in with hasOwn: no array is allocated on the hot path.
  for (const key in value) {
    if (Object.hasOwn(value, key) && !(known as readonly string[]).includes(key)) throw unknownOption(key, argument, known);
  }
  return value as Partial<T>;
}


function unknownOption(key: string, argument: string, known: readonly string[]): InvalidArgumentError {
  const shown = key.length > 40 ? `${key.slice(0, 37)}...` : key;
  const valid = known.length === 0 ? 'it takes none' : `valid: ${known.join(', ')}`;
  const closest = closestKey(key, known);
  return new InvalidArgumentError(
    argument,
    `unknown option '${shown}'${closest === null ? '' : `; did you mean '${closest}'?`} (${valid})`,
  );
}

/** The known key nearest to `key` by edit distance (case-insensitive), if near enough to be a typo. */
function closestKey(key: string, known: readonly string[]): string | null {
  const k = key.toLowerCase();
  let best: string | null = null;
  let bestDistance = Infinity;
  for (const candidate of known) {
    const c = candidate.toLowerCase();
    // A prefix (`timeout` for `timeoutMs`) is the commonest slip: count it as near.
    const d = c.startsWith(k) || k.startsWith(c) ? Math.min(2, editDistance(k, c)) : editDistance(k, c);
    if (d < bestDistance) {
      best = candidate;
      bestDistance = d;
    }
  }
  return bestDistance <= Math.max(2, Math.floor(key.length / 3)) ? best : null;
}

function editDistance(a: string, b: string): number {
  if (a.length > 64 || b.length > 64) return Infinity;
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      row[j] = Math.min(prev[j]! + 1, row[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    prev = row;
  }
  return prev[b.length]!;
}

/** A wait bound: a finite number of ms >= 0, or Infinity where `allowInfinity`. */
export function durationMs(
  value: unknown,
  argument: string,
  opts: { min?: number; allowInfinity?: boolean; integer?: boolean } = {},
): number {
  const min = opts.min ?? 0;
  if (typeof value !== 'number' || Number.isNaN(value)) {
    throw new InvalidArgumentError(argument, `expected a number of milliseconds, got ${describeType(value)}`);
  }
  if (value === Infinity) {
    if (opts.allowInfinity) return value;
    throw new InvalidArgumentError(argument, 'must be finite');
  }
  if (!Number.isFinite(value) || value < min) {
    throw new InvalidArgumentError(argument, `must be at least ${min} ms, got ${value}`);
  }
  if (value > MAX_DURATION_MS) {
    throw new InvalidArgumentError(argument, `must be at most ${MAX_DURATION_MS} ms (about 1 year)${opts.allowInfinity ? '; pass Infinity to wait without bound' : ''}`);
  }
  if (opts.integer && !Number.isInteger(value)) throw new InvalidArgumentError(argument, `must be a whole number, got ${value}`);
  return value;
}

export const MAX_DURATION_MS = 365 * 24 * 3600 * 1000;

export function positiveInteger(value: unknown, argument: string, max = 1_000_000): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > max) {
    throw new InvalidArgumentError(argument, `expected a whole number from 1 to ${max}, got ${describeType(value)}`);
  }
  return value;
}

/** An object of options passed on to another library as they are (its own keys, unchecked): undefined means {}. */
export function objectOption(value: unknown, argument: string): object {
  if (value === undefined) return {};
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new InvalidArgumentError(argument, `expected an options object, got ${describeType(value)}`);
  }
  return value;
}

export function abortSignal(value: unknown, argument = 'signal'): AbortSignal | undefined {
  if (value === undefined) return undefined;
  if (!(value instanceof AbortSignal)) {
    throw new InvalidArgumentError(argument, `expected an AbortSignal, got ${describeType(value)}`);
  }
  return value;
}

export function oneOf<T extends string>(value: unknown, argument: string, allowed: readonly T[], fallback: T): T {
  if (value === undefined) return fallback;
  if (typeof value !== 'string' || !(allowed as readonly string[]).includes(value)) {
    throw new InvalidArgumentError(argument, `expected one of ${allowed.map((a) => `'${a}'`).join(', ')}, got ${describeType(value)}`);
  }
  return value as T;
}

export function booleanOption(value: unknown, argument: string, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean') throw new InvalidArgumentError(argument, `expected true or false, got ${describeType(value)}`);
  return value;
}

export function callback(value: unknown, argument: string): void {
  if (typeof value !== 'function') throw new InvalidArgumentError(argument, `expected a function, got ${describeType(value)}`);
}

/** The options of a try method (tryAcquire, tryLease): one attempt, so a timeoutMs other than 0 is refused. */
export function singleAttempt<T extends { timeoutMs?: number }>(o: Partial<T>, method: string, waitingMethod: string): Partial<T> {
  if (o.timeoutMs !== undefined && o.timeoutMs !== 0) {
    throw new InvalidArgumentError('timeoutMs', `${method} makes a single attempt; use ${waitingMethod}() to wait`);
  }
  return { ...o, timeoutMs: 0 };
}
