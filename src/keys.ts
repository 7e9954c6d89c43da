import { describeType, InvalidArgumentError } from './core/index.js';
import { murmur3x64First64 } from './murmur3-x64.js';
import { optionKeys, optionsObject } from './options.js';

/** What a lock is called: a name (hashed) or an explicit int64 key. */
export type LockName = string | bigint | number;

/** A resolved lock: the key PostgreSQL sees and the name it came from (null for explicit keys). */
export interface LockTarget {
  readonly key: bigint;
  readonly name: string | null;
}

const MAX_NAME_BYTES = 1024;
const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;
const encoder = new TextEncoder();

export interface LockKeyOptions {
  namespace?: string;
}
const LOCK_KEY_OPTION_KEYS = optionKeys<LockKeyOptions>({ namespace: true });

/**
 * The int64 advisory-lock key of a name: the first 64-bit word of MurmurHash3_x64_128 over the
 * UTF-8 bytes (namespace ‖ 0x00 ‖ name when namespaced), seed 0, read as signed.
 * Stable forever: other languages reproduce it from test/vectors/keys.json.
 *
 * @example
 * ```ts fragment
 * lockKey('order:123'); // -2046217617591970219n, as pgfence.lock_key('order:123') in SQL
 * lockKey('order:123', { namespace: 'app' }); // 4553773078218211980n
 * ```
 */
export function lockKey(name: string, opts?: LockKeyOptions): bigint {
  const namespace = opts === undefined ? undefined : optionsObject<LockKeyOptions>(opts, 'lockKey options', LOCK_KEY_OPTION_KEYS).namespace;
  return keyOf(name, namespace);
}

function keyOf(name: unknown, namespace: unknown): bigint {
  // Services take the same few names over and over: remember recent ones. Only strings that passed
  // validation are ever stored, and names without a namespace and each namespace's names live in
  // separate maps, so no spelling of one can be found as the other.
  const cache = typeof name !== 'string' ? undefined : namespace === undefined ? plainKeys : typeof namespace === 'string' ? namespacedKeys.get(namespace) : undefined;
  const cached = cache?.get(name as string) ?? (namespace === undefined && typeof name === 'string' ? olderPlainKeys.get(name) : undefined);
  if (cached !== undefined) return cached;
  const key = computeKey(name, namespace);
  remember(namespace as string | undefined, name as string, key);
  return key;
}

/**
 * Recently used names (each validated) and their keys: names without a namespace in two generations
 * (a full one becomes the older, and the older is dropped: no per-insert eviction, which costs a Map
 * iterator over its deleted entries when thousands of new names come at once), and per namespace.
 */
const RECENT_KEYS = 4096;
let plainKeys = new Map<string, bigint>();
let olderPlainKeys = new Map<string, bigint>();
const namespacedKeys = new Map<string, Map<string, bigint>>();
let namespacedCount = 0;

function remember(namespace: string | undefined, name: string, key: bigint): void {
  if (namespace === undefined) {
    if (plainKeys.size >= RECENT_KEYS) {
      olderPlainKeys = plainKeys;
      plainKeys = new Map();
    }
    plainKeys.set(name, key);
    return;
  }
  if (namespacedCount >= RECENT_KEYS) {
    namespacedKeys.clear();
    namespacedCount = 0;
  }
  let names = namespacedKeys.get(namespace);
  if (!names) namespacedKeys.set(namespace, (names = new Map()));
  if (!names.has(name)) namespacedCount++;
  names.set(name, key);
}

/**
 * Where names are encoded for hashing: namespace ‖ 0x00 ‖ name, each part up to 3 bytes per UTF-16
 * unit of at most MAX_NAME_BYTES units (longer ones are rejected before encoding). Reused: hashing
 * a new name allocates nothing but its key (acquireAll hashes thousands at once).
 */
const MAX_PART_BYTES = 3 * MAX_NAME_BYTES;
const scratch = new Uint8Array(2 * MAX_PART_BYTES + 1);

function computeKey(name: unknown, namespace: unknown): bigint {
  if (namespace === undefined) return murmur3x64First64(scratch, encodeName('name', name, 0));
  const nsLength = encodeName('namespace', namespace, 0);
  scratch[nsLength] = 0;
  return murmur3x64First64(scratch, nsLength + 1 + encodeName('name', name, nsLength + 1));
}

/**
 * Validates a name (or namespace) as nameToBytes does and writes its UTF-8 bytes into `scratch` at
 * `offset`; returns their count. Printable ASCII, what names nearly always are, is copied in a loop.
 */
function encodeName(argument: string, value: unknown, offset: number): number {
  if (typeof value === 'string' && value.length > 0 && value.length <= MAX_NAME_BYTES) {
    let i = 0;
    for (; i < value.length; i++) {
      const c = value.charCodeAt(i);
      if (c === 0 || c >= 0x80) break;
      scratch[offset + i] = c;
    }
    if (i === value.length) return i;
  }
  const bytes = nameToBytes(argument, value); // anything else: checked (and refused) the one way
  scratch.set(bytes, offset);
  return bytes.length;
}

/** Resolves a user-supplied lock name or key, validating it before any I/O. */
export function resolveLock(name: unknown, namespace?: string, argument = 'name'): LockTarget {
  if (typeof name === 'string') {
    return { key: keyOf(name, namespace), name };
  }
  return { key: toKey(name, argument), name: null };
}

/** An explicit key: a bigint in the signed int64 range, or a safe integer number. */
function toKey(value: unknown, argument = 'key'): bigint {
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
  return murmur3x64First64(bytes);
}
