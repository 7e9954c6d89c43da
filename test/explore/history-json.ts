/** A history as JSON and back (tokens are bigints: written as "<digits>n"), to save a round and to feed the checker's tests. */
import type { History } from './history.js';

const BIGINT = /^-?\d+n$/;

export function stringifyHistory(history: History): string {
  return JSON.stringify(history, (_key, value: unknown) => (typeof value === 'bigint' ? `${value}n` : value));
}

export function parseHistory(text: string): History {
  return JSON.parse(text, (_key, value: unknown) => (typeof value === 'string' && BIGINT.test(value) ? BigInt(value.slice(0, -1)) : value)) as History;
}
