import murmur from 'murmurhash3js-revisited';
import { InvalidArgumentError } from './errors.js';

/** What a lock is called: a name (hashed) or an explicit int64 key. */
export type LockName = string | bigint | number;

/** A resolved lock: the key PostgreSQL sees and the name it came from (null for explicit keys). */
export interface LockTarget {
  readonly key: bigint;
  readonly name: string | null;
}

export const MAX_NAME_BYTES = 1024;
const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;
const encoder = new TextEncoder();

/**
 * The int64 advisory-lock key of a name: the first 64-bit word of MurmurHash3_x64_128 over the
 * UTF-8 bytes (namespace ‖ 0x00 ‖ name when namespaced), seed 0, read as signed.
 * Stable forever: other languages reproduce it from test/vectors/keys.json.
 */
export function lockKey(name: string, opts: { namespace?: string } = {}): bigint {
  if (typeof opts !== 'object' || opts === null) throw new InvalidArgumentError('opts', 'must be an object');
  // Services take the same few names over and over: remember recent ones (already validated).
  const cacheKey = typeof name === 'string' && (opts.namespace === undefined || typeof opts.namespace === 'string')
    ? opts.namespace === undefined ? name : `${opts.namespace}\0${name}`
    : null;
  const cached = cacheKey === null ? undefined : recentKeys.get(cacheKey);
  if (cached !== undefined) return cached;
  const key = computeKey(name, opts.namespace);
  if (cacheKey !== null) {
    if (recentKeys.size >= RECENT_KEYS) recentKeys.delete(recentKeys.keys().next().value!);
    recentKeys.set(cacheKey, key);
  }
  return key;
}

const RECENT_KEYS = 4096;
/** Validated names (with their namespace, NUL-separated: neither can contain NUL) and their keys. */
const recentKeys = new Map<string, bigint>();

function computeKey(name: string, namespace: string | undefined): bigint {
  const nameBytes = nameToBytes('name', name);
  if (namespace === undefined) return hashKey(nameBytes);
  const nsBytes = nameToBytes('namespace', namespace);
  const bytes = new Uint8Array(nsBytes.length + 1 + nameBytes.length);
  bytes.set(nsBytes, 0);
  bytes.set(nameBytes, nsBytes.length + 1);
  return hashKey(bytes);
}

/** Resolves a user-supplied lock name or key, validating it before any I/O. */
export function resolveLock(name: unknown, namespace?: string, argument = 'name'): LockTarget {
  if (typeof name === 'string') {
    return { key: namespace === undefined ? lockKey(name) : lockKey(name, { namespace }), name };
  }
  return { key: toKey(name, argument), name: null };
}

/** An explicit key: a bigint in the signed int64 range, or a safe integer number. */
export function toKey(value: unknown, argument = 'key'): bigint {
  if (typeof value === 'bigint') {
    if (value < INT64_MIN || value > INT64_MAX) {
      throw new InvalidArgumentError(argument, `key ${value} is outside the signed int64 range`);
    }
    return value;
  }
  if (typeof value === 'number') {
    if (!Number.isSafeInteger(value)) {
      throw new InvalidArgumentError(argument, `a numeric key must be a safe integer, got ${value}; pass a bigint for larger keys`);
    }
    return BigInt(value);
  }
  throw new InvalidArgumentError(argument, `expected a lock name (string) or key (bigint), got ${describeType(value)}`);
}

/**
 * Keys pgfence uses for its own purposes (semaphore permits, ...). The bytes start with NUL, which
 * no valid name or namespace contains, so an internal key never equals a user name's key.
 */
export function internalKey(kind: string, ...parts: string[]): bigint {
  return hashKey(encoder.encode(`\0pgfence\0${kind}\0${parts.join('\0')}`));
}

/** Validates a name (or namespace) and returns its UTF-8 bytes. */
export function nameToBytes(argument: string, value: unknown): Uint8Array {
  if (typeof value !== 'string') {
    throw new InvalidArgumentError(argument, `expected a string, got ${describeType(value)}`);
  }
  if (value.length === 0) throw new InvalidArgumentError(argument, 'must not be empty');
  if (!value.isWellFormed()) throw new InvalidArgumentError(argument, 'must be well-formed Unicode (it has a lone surrogate)');
  if (value.includes('\0')) throw new InvalidArgumentError(argument, 'must not contain NUL characters');
  // Every UTF-16 unit takes at least one UTF-8 byte: reject huge strings without encoding them.
  if (value.length > MAX_NAME_BYTES) {
    throw new InvalidArgumentError(argument, `must be at most ${MAX_NAME_BYTES} UTF-8 bytes, got at least ${value.length}`);
  }
  const bytes = encoder.encode(value);
  if (bytes.length > MAX_NAME_BYTES) throw new InvalidArgumentError(argument, `must be at most ${MAX_NAME_BYTES} UTF-8 bytes, got ${bytes.length}`);
  return bytes;
}

function hashKey(bytes: Uint8Array): bigint {
  const hex = murmur.x64.hash128(bytes, 0);
  return BigInt.asIntN(64, BigInt(`0x${hex.slice(0, 16)}`));
}

export function describeType(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'number' && Number.isNaN(value)) return 'NaN';
  return typeof value === 'object' ? 'an object' : `${typeof value} ${String(value).slice(0, 40)}`;
}
