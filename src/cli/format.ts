/** Output helpers shared by the subcommands: durations, error text (tables: core's text-table). */

/** A short human duration: 850ms, 12s, 4m 05s, 3h 02m, 2d 04h. */
export function shortDuration(ms: number): string {
  if (!Number.isFinite(ms)) return '?';
  const v = Math.max(0, ms);
  if (v < 1000) return `${Math.round(v)}ms`;
  const s = Math.floor(v / 1000);
  if (s < 60) return v < 10_000 ? `${(v / 1000).toFixed(1)}s` : `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${String(s % 60).padStart(2, '0')}s`;
  const h = Math.floor(m / 60);
  if (h < 24) return `${h}h ${String(m % 60).padStart(2, '0')}m`;
  return `${Math.floor(h / 24)}d ${String(h % 24).padStart(2, '0')}h`;
}

/** "12s ago", or ">=12s ago" when the time is only a lower bound. */
export function ago(ms: number, lowerBound = false): string {
  return `${lowerBound ? '>=' : ''}${shortDuration(ms)} ago`;
}

/** Shortens text to `max` characters with an ellipsis. */
export function clip(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max - 3)}...` : text;
}

/** An error's message and, when it has one, its code (pgfence's PGFENCE_*, PostgreSQL's SQLSTATE, Node's E*). */
export function errorText(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const code = (err as { code?: unknown }).code;
  const message = err.message || String(err);
  return typeof code === 'string' && code !== '' && !message.includes(code) ? `${message} (${code})` : message;
}
