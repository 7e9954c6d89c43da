declare module 'murmurhash3js-revisited' {
  interface Murmur {
    x64: { hash128(bytes: Uint8Array, seed?: number): string };
    x86: { hash32(bytes: Uint8Array, seed?: number): number; hash128(bytes: Uint8Array, seed?: number): string };
  }
  const murmur: Murmur;
  export default murmur;
}
