/**
 * The first 64-bit word of MurmurHash3_x64_128 (seed 0), in 32-bit halves without allocating: every
 * acquire of a new name hashes it, and acquireAll hashes thousands at once (the general-purpose
 * package this replaces allocates arrays for every 64-bit step, ~10x slower). Checked against the
 * reference vectors in test/vectors/keys.json.
 */

// 64-bit values are (hi, lo) pairs of uint32; results of the helpers land in these two.
let rh = 0;
let rl = 0;

/** (ah, al) * (bh, bl) mod 2^64, in 16-bit limbs (each partial product fits a double exactly). */
function mul(ah: number, al: number, bh: number, bl: number): void {
  const a48 = ah >>> 16;
  const a32 = ah & 0xffff;
  const a16 = al >>> 16;
  const a00 = al & 0xffff;
  const b48 = bh >>> 16;
  const b32 = bh & 0xffff;
  const b16 = bl >>> 16;
  const b00 = bl & 0xffff;
  let c00 = a00 * b00;
  let c16 = c00 >>> 16;
  c00 &= 0xffff;
  c16 += a16 * b00;
  let c32 = c16 >>> 16;
  c16 &= 0xffff;
  c16 += a00 * b16;
  c32 += c16 >>> 16;
  c16 &= 0xffff;
  c32 += a32 * b00;
  let c48 = c32 >>> 16;
  c32 &= 0xffff;
  c32 += a16 * b16;
  c48 += c32 >>> 16;
  c32 &= 0xffff;
  c32 += a00 * b32;
  c48 += c32 >>> 16;
  c32 &= 0xffff;
  c48 += a48 * b00 + a32 * b16 + a16 * b32 + a00 * b48;
  c48 &= 0xffff;
  rh = ((c48 << 16) | c32) >>> 0;
  rl = ((c16 << 16) | c00) >>> 0;
}

function add(ah: number, al: number, bh: number, bl: number): void {
  const lo = al + bl;
  rl = lo >>> 0;
  rh = (ah + bh + (lo > 0xffffffff ? 1 : 0)) >>> 0;
}

/** Rotates left by n, 0 < n < 64. */
function rotl(h: number, l: number, n: number): void {
  if (n === 32) {
    rh = l;
    rl = h;
    return;
  }
  if (n > 32) {
    const t = h;
    h = l;
    l = t;
    n -= 32;
  }
  rh = ((h << n) | (l >>> (32 - n))) >>> 0;
  rl = ((l << n) | (h >>> (32 - n))) >>> 0;
}

/** fmix64: k ^= k >>> 33; k *= 0xff51afd7ed558ccd; k ^= k >>> 33; k *= 0xc4ceb9fe1a85ec53; k ^= k >>> 33. */
function fmix(h: number, l: number): void {
  l = (l ^ (h >>> 1)) >>> 0;
  mul(h, l, 0xff51afd7, 0xed558ccd);
  h = rh;
  l = (rl ^ (rh >>> 1)) >>> 0;
  mul(h, l, 0xc4ceb9fe, 0x1a85ec53);
  rl = (rl ^ (rh >>> 1)) >>> 0;
}

const C1H = 0x87c37b91;
const C1L = 0x114253d5;
const C2H = 0x4cf5ad43;
const C2L = 0x2745937f;

/** Little-endian uint32 at i. */
function word(b: Uint8Array, i: number): number {
  return (b[i]! | (b[i + 1]! << 8) | (b[i + 2]! << 16) | (b[i + 3]! << 24)) >>> 0;
}

/** Turns the result's two halves into one bigint with a single allocation. */
const int64View = new DataView(new ArrayBuffer(8));

/** The first 64-bit word of MurmurHash3_x64_128 of bytes[0, len) (seed 0), as a signed int64. */
export function murmur3x64First64(bytes: Uint8Array, len = bytes.length): bigint {
  const blocks = len - (len % 16);
  let h1h = 0;
  let h1l = 0;
  let h2h = 0;
  let h2l = 0;
  let k1h: number;
  let k1l: number;
  let k2h: number;
  let k2l: number;
  for (let i = 0; i < blocks; i += 16) {
    k1l = word(bytes, i);
    k1h = word(bytes, i + 4);
    k2l = word(bytes, i + 8);
    k2h = word(bytes, i + 12);
    // k1 *= c1; k1 = rotl(k1, 31); k1 *= c2; h1 ^= k1
    mul(k1h, k1l, C1H, C1L);
    rotl(rh, rl, 31);
    mul(rh, rl, C2H, C2L);
    h1h = (h1h ^ rh) >>> 0;
    h1l = (h1l ^ rl) >>> 0;
    // h1 = rotl(h1, 27); h1 += h2; h1 = h1 * 5 + 0x52dce729
    rotl(h1h, h1l, 27);
    add(rh, rl, h2h, h2l);
    mul(rh, rl, 0, 5);
    add(rh, rl, 0, 0x52dce729);
    h1h = rh;
    h1l = rl;
    // k2 *= c2; k2 = rotl(k2, 33); k2 *= c1; h2 ^= k2
    mul(k2h, k2l, C2H, C2L);
    rotl(rh, rl, 33);
    mul(rh, rl, C1H, C1L);
    h2h = (h2h ^ rh) >>> 0;
    h2l = (h2l ^ rl) >>> 0;
    // h2 = rotl(h2, 31); h2 += h1; h2 = h2 * 5 + 0x38495ab5
    rotl(h2h, h2l, 31);
    add(rh, rl, h1h, h1l);
    mul(rh, rl, 0, 5);
    add(rh, rl, 0, 0x38495ab5);
    h2h = rh;
    h2l = rl;
  }
  const tail = len - blocks;
  if (tail > 8) {
    k2h = 0;
    k2l = 0;
    for (let j = tail - 1; j >= 8; j--) {
      const b = bytes[blocks + j]!;
      if (j >= 12) k2h = (k2h | (b << (8 * (j - 12)))) >>> 0;
      else k2l = (k2l | (b << (8 * (j - 8)))) >>> 0;
    }
    mul(k2h, k2l, C2H, C2L);
    rotl(rh, rl, 33);
    mul(rh, rl, C1H, C1L);
    h2h = (h2h ^ rh) >>> 0;
    h2l = (h2l ^ rl) >>> 0;
  }
  if (tail > 0) {
    k1h = 0;
    k1l = 0;
    for (let j = Math.min(tail, 8) - 1; j >= 0; j--) {
      const b = bytes[blocks + j]!;
      if (j >= 4) k1h = (k1h | (b << (8 * (j - 4)))) >>> 0;
      else k1l = (k1l | (b << (8 * j))) >>> 0;
    }
    mul(k1h, k1l, C1H, C1L);
    rotl(rh, rl, 31);
    mul(rh, rl, C2H, C2L);
    h1h = (h1h ^ rh) >>> 0;
    h1l = (h1l ^ rl) >>> 0;
  }
  // h1 ^= len; h2 ^= len (len < 2^32); h1 += h2; h2 += h1; fmix both; h1 += h2
  h1l = (h1l ^ len) >>> 0;
  h2l = (h2l ^ len) >>> 0;
  add(h1h, h1l, h2h, h2l);
  h1h = rh;
  h1l = rl;
  add(h2h, h2l, h1h, h1l);
  h2h = rh;
  h2l = rl;
  fmix(h1h, h1l);
  h1h = rh;
  h1l = rl;
  fmix(h2h, h2l);
  add(h1h, h1l, rh, rl);
  // Signed: the high word's top bit is the sign.
  int64View.setUint32(0, rh);
  int64View.setUint32(4, rl);
  return int64View.getBigInt64(0);
}
