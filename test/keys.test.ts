import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError, lockKey } from '../src/index.js';
import murmur from 'murmurhash3js-revisited';
import { semaphoreKeys } from '../src/advisory/semaphore.js';
import { internalKey, resolveLock } from '../src/keys.js';
import { murmur3x64First64 } from '../src/murmur3-x64.js';

const vectors = JSON.parse(readFileSync(new URL('./vectors/keys.json', import.meta.url), 'utf8')) as {
  vectors: { name: string; namespace?: string; key: string }[];
};

describe('lockKey', () => {
  it('matches the published vectors (the ones in DESIGN.md among them)', () => {
    const byName = new Map(vectors.vectors.map((v) => [`${v.namespace ?? ''}|${v.name}`, v.key]));
    expect(byName.get('|order:123')).toBe('-2046217617591970219');
    expect(byName.get('|héllo wörld')).toBe('7743223038208521019');
    expect(byName.get('app|order:123')).toBe('4553773078218211980');
    for (const v of vectors.vectors) {
      const key = v.namespace === undefined ? lockKey(v.name) : lockKey(v.name, { namespace: v.namespace });
      expect(key, v.name).toBe(BigInt(v.key));
    }
  });

  it('returns signed int64 keys', () => {
    for (let i = 0; i < 2000; i++) {
      const k = lockKey(`name-${i}`);
      expect(k >= -(2n ** 63n) && k < 2n ** 63n).toBe(true);
    }
  });

  it('keeps namespaces apart, and a namespace is not a name prefix', () => {
    expect(lockKey('x', { namespace: 'a' })).not.toBe(lockKey('x', { namespace: 'b' }));
    expect(lockKey('x', { namespace: 'a' })).not.toBe(lockKey('ax'));
    expect(lockKey('x', { namespace: 'a' })).not.toBe(lockKey('x'));
  });

  it.each([
    ['empty', ''],
    ['lone surrogate', 'ab\uD800'],
    ['NUL', 'a\0b'],
    ['too long', 'x'.repeat(1025)],
    ['too many UTF-8 bytes', 'é'.repeat(513)],
  ])('rejects a %s name', (_label, name) => {
    expect(() => lockKey(name)).toThrow(InvalidArgumentError);
  });

  it('accepts exactly 1024 UTF-8 bytes', () => {
    expect(typeof lockKey('é'.repeat(512))).toBe('bigint');
  });

  it.each([[undefined], [null], [42], [{}], [[]]])('rejects a name of the wrong type (%s)', (name) => {
    expect(() => lockKey(name as unknown as string)).toThrow(InvalidArgumentError);
  });

  it('rejects a bad namespace', () => {
    expect(() => lockKey('a', { namespace: '' })).toThrow(InvalidArgumentError);
    expect(() => lockKey('a', { namespace: 'a\0' })).toThrow(InvalidArgumentError);
  });
});

describe('explicit keys', () => {
  it('take int64 bigints and safe integers', () => {
    expect(resolveLock(42n)).toEqual({ key: 42n, name: null });
    expect(resolveLock(-(2n ** 63n)).key).toBe(-(2n ** 63n));
    expect(resolveLock(2n ** 63n - 1n).key).toBe(2n ** 63n - 1n);
    expect(resolveLock(7).key).toBe(7n);
    expect(resolveLock(-7).key).toBe(-7n);
  });

  it.each([[2n ** 63n], [-(2n ** 63n) - 1n], [1.5], [NaN], [Infinity], [2 ** 53], [true], [Symbol('x')]])('reject %s', (key) => {
    expect(() => resolveLock(key)).toThrow(InvalidArgumentError);
  });
});

describe('internal keys', () => {
  it('hash bytes that no valid name or namespace can spell (they contain NUL)', () => {
    const text = '\0pgfence\0sem\0jobs\0' + '1';
    expect(() => lockKey(text)).toThrow(InvalidArgumentError);
    expect(() => lockKey(text.slice(1), { namespace: 'x' })).toThrow(InvalidArgumentError);
    expect(internalKey('sem', 'jobs', '1')).not.toBe(internalKey('sem', 'jobs', '2'));
  });

  it('are the hash of NUL ‖ "pgfence" ‖ NUL ‖ kind ‖ NUL ‖ parts joined by NUL (bytes pinned: other languages must match)', () => {
    const hashOf = (bytes: Uint8Array) => BigInt.asIntN(64, BigInt(`0x${murmur.x64.hash128(bytes, 0).slice(0, 16)}`));
    const utf8 = (text: string) => new TextEncoder().encode(text);
    const semaphoreBytes = Uint8Array.from([0, ...utf8('pgfence'), 0, ...utf8('semaphore'), 0, ...utf8('42')]);
    expect(internalKey('semaphore', '42')).toBe(hashOf(semaphoreBytes));
    expect(internalKey('semaphore', '42', '0')).toBe(hashOf(Uint8Array.from([...semaphoreBytes, 0, ...utf8('0')])));
    // The same values, written out: a change of the byte layout is a breaking change.
    expect(internalKey('semaphore', '42')).toBe(-7327088917395968816n);
    expect(internalKey('semaphore', '42', '0')).toBe(66088760948969954n);
    expect(internalKey('leader', '42', '7')).toBe(7734803360529523376n);
    // What semaphores and leader guards use.
    expect(semaphoreKeys({ key: 42n, name: 'x' }, 1)).toEqual({ baseKey: -7327088917395968816n, slots: [66088760948969954n] });
  });
});

describe('the hash', () => {
  it('is MurmurHash3_x64_128 h1 as the reference package computes it, for every tail length and random bytes', () => {
    const reference = (bytes: Uint8Array) => BigInt.asIntN(64, BigInt(`0x${murmur.x64.hash128(bytes, 0).slice(0, 16)}`));
    let seed = 12345;
    const byte = () => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) >>> 16) & 0xff;
    for (let n = 0; n < 3000; n++) {
      const bytes = Uint8Array.from({ length: n % 80 }, byte);
      expect(murmur3x64First64(bytes)).toBe(reference(bytes));
    }
  });
});

describe('the key cache', () => {
  it('never lets a refused name through because a namespaced name was hashed first (key forging)', () => {
    const namespaced = lockKey('a', { namespace: 'x' });
    expect(() => lockKey('x\0a')).toThrow(InvalidArgumentError);
    // Nor through a locker's resolution of names, nor the other way round.
    expect(() => resolveLock('x\0a')).toThrow(InvalidArgumentError);
    expect(lockKey('x\u0001a')).not.toBe(namespaced);
    lockKey('x\u0001b');
    expect(() => lockKey('b', { namespace: 'x\u0001' })).not.toThrow();
    expect(lockKey('b', { namespace: 'x\u0001' })).not.toBe(lockKey('x\u0001b'));
    // A namespace and a name are only ever looked up as that pair.
    expect(lockKey('a', { namespace: 'x' })).toBe(namespaced);
    expect(lockKey('x', { namespace: 'a' })).not.toBe(namespaced);
  });
});

describe('lockKey options', () => {
  it.each<[string, unknown]>([
    ['an array', []],
    ['an array with a namespace', Object.assign([], { namespace: 'x' })],
    ['null', null],
    ['a string', 'x'],
  ])('refuses %s as its options', (_label, opts) => {
    expect(() => lockKey('a', opts as never)).toThrow(InvalidArgumentError);
  });

  it('refuses an unknown option, naming the closest valid one', () => {
    expect(() => lockKey('a', { namspace: 'x' } as never)).toThrow(/unknown option 'namspace'; did you mean 'namespace'\?/);
  });
});
