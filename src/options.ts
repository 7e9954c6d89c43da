import { InvalidArgumentError } from './errors.js';
import { describeType } from './keys.js';

/** Checks every argument before any I/O: each failure names the argument and what it accepts. */

export function optionsObject<T extends object>(value: unknown, argument: string): Partial<T> {
  if (value === undefined) return {};
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new InvalidArgumentError(argument, `expected an options object, got ${describeType(value)}`);
  }
  return value as Partial<T>;
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

/** setTimeout for any duration (Node caps a single timer at ~24.8 days); returns a cancel function. */
export function setLongTimeout(fn: () => void, ms: number, unref = false): () => void {
  if (ms === Infinity) return () => {};
  const MAX = 2 ** 31 - 1;
  let timer: NodeJS.Timeout;
  const arm = (left: number) => {
    timer = setTimeout(left > MAX ? () => arm(left - MAX) : fn, Math.min(left, MAX));
    if (unref) timer.unref();
  };
  arm(ms);
  return () => clearTimeout(timer);
}
