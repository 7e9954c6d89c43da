import type { Logger } from '../../src/index.js';

export interface LogEntry {
  level: 'debug' | 'info' | 'warn' | 'error';
  obj: Record<string, unknown>;
  msg: string;
}

/** A logger that keeps every entry, in order, with its level. */
export function capturingLogger(): { entries: LogEntry[]; logger: Logger } {
  const entries: LogEntry[] = [];
  const at = (level: LogEntry['level']) => (obj: object, msg?: string) => void entries.push({ level, obj: obj as Record<string, unknown>, msg: msg ?? '' });
  return { entries, logger: { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') } };
}
