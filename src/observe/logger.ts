import { withBigintsAsStrings } from '../core/index.js';

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
  for (const level of LEVELS) out[level] = (obj, msg) => logger[level](withBigintsAsStrings(obj) as object, msg);
  return out;
}
