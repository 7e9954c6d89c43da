import { withBigintsAsStrings } from '../core/index.js';

/**
 * The logger shape pgfence writes to: pino's and console's both fit. pgfence asks the logger which
 * levels it wants: `isLevelEnabled(level)` when it has one (pino, winston), else its `level` (pino's
 * names), else info and above — so a plain `console` prints no debug line per acquire and release;
 * give it `level: 'debug'` (`{ ...console, level: 'debug' }`) to see them.
 *
 * @example
 * ```ts fragment
 * const quiet = createLocker({ connectionString: process.env.DATABASE_URL, logger: console }); // info and above
 * const verbose = createLocker({ connectionString: process.env.DATABASE_URL, logger: { ...console, level: 'debug' } });
 * // pino: logger: pino({ level: 'debug' }) (its isLevelEnabled() is asked before every line)
 * ```
 */
export interface Logger {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
  /** Asked before every line, so a level changed at run time applies at once (pino, winston). */
  isLevelEnabled?(level: string): boolean;
  /** The lowest level to write ('trace', 'debug', 'info', 'warn', 'error', 'fatal' or 'silent'), when there is no isLevelEnabled. */
  level?: string;
}

const noop = () => {};
export const silentLogger: Logger = { debug: noop, info: noop, warn: noop, error: noop, isLevelEnabled: () => false };

const LEVELS = ['debug', 'info', 'warn', 'error'] as const;
type Level = (typeof LEVELS)[number];
const RANK: Record<string, number> = { trace: 10, debug: 20, info: 30, warn: 40, error: 50, fatal: 60, silent: Infinity };

/** Whether `logger` takes lines at `level` (see Logger): its isLevelEnabled, else its level, else info and above. */
export function logsAt(logger: Logger, level: Level): boolean {
  if (typeof logger.isLevelEnabled === 'function') return logger.isLevelEnabled(level);
  const threshold = typeof logger.level === 'string' ? RANK[logger.level] : undefined;
  return RANK[level]! >= (threshold ?? RANK.info!);
}

/**
 * The caller's logger, sent only the levels it takes, and given log objects in which every bigint
 * (keys and tokens, also inside an error such as `err.key`) is a decimal string: JSON loggers either
 * throw on a bigint or, like pino's serialiser, write it as a JSON number, which readers parse as a
 * double and round.
 */
export function jsonSafeLogger(logger: Logger): Logger {
  const out: Logger = { ...silentLogger, isLevelEnabled: (level) => logsAt(logger, level as Level) };
  for (const level of LEVELS) {
    out[level] = (obj, msg) => {
      if (logsAt(logger, level)) logger[level](withBigintsAsStrings(obj) as object, msg);
    };
  }
  return out;
}
