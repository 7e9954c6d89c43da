import { intArray, isSchemaMissing, textArray } from '../core/index.js';
import type { Logger } from './logger.js';
import { INSERT_NAMES } from './inspect-sql.js';

/** Remembers at most this many keys per process; beyond it, names are written again (harmlessly). */
const MAX_REMEMBERED = 100_000;
/**
 * How long notes gather after the first unflushed one before they are written together. Short, so
 * that another process sees a name soon after the grant (DESIGN: within ~50 ms); while a write is in
 * flight, new notes wait for it and go out together in the next one.
 */
const COALESCE_MS = 5;

/** A failed write is tried again after this long, doubling up to RETRY_MAX_MS while it keeps failing. */
const RETRY_FIRST_MS = 100;
const RETRY_MAX_MS = 5_000;

/**
 * Writes lock names to pgfence.lock_names so that inspect() and `pgfence status` can show names for
 * the keys they find in pg_locks. Once per name per process, batched, in the background, through
 * `query` (the locker's home session, or the pool behind a transaction pooler): it never adds a round trip to an
 * acquire. Without pgfence's schema it stays quiet.
 */
export class NameRegistry {
  private readonly seen = new Set<bigint>();
  private pending = new Map<bigint, { name: string; namespace: string | null }>();
  private timer: NodeJS.Timeout | null = null;
  private writing = false;
  private disabled = false;
  private flushing: Promise<void> = Promise.resolve();
  private retryMs = 0;

  constructor(
    /** Runs a statement (prepared where its connection allows) with the arrays written as text. */
    private readonly query: (statement: { name: string; text: string }, values: string[]) => Promise<unknown>,
    private readonly logger: Logger,
  ) {}

  note(key: bigint, name: string | null, namespace: string | null): void {
    if (name === null || this.disabled || this.seen.has(key)) return;
    if (this.seen.size >= MAX_REMEMBERED) this.seen.clear();
    this.seen.add(key);
    this.pending.set(key, { name, namespace });
    this.schedule();
  }

  /** Writes what is pending now (close() and inspect() call it; otherwise a short timer does). */
  flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const batch = this.pending;
    this.pending = new Map();
    if (batch.size === 0 || this.disabled) return this.flushing;
    this.writing = true;
    this.flushing = this.flushing
      .then(() => this.write(batch))
      .finally(() => {
        this.writing = false;
        this.schedule();
      });
    return this.flushing;
  }

  /** Writes what is pending once more, then stops (no retry after the locker closed). */
  async close(): Promise<void> {
    await this.flush();
    this.disabled = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  /** A timer from the first unflushed note; none while a write is in flight (its end schedules the next). */
  private schedule(): void {
    if (this.timer || this.writing || this.pending.size === 0 || this.disabled) return;
    this.timer = setTimeout(() => void this.flush(), this.retryMs || COALESCE_MS);
    this.timer.unref();
  }

  private write(batch: Map<bigint, { name: string; namespace: string | null }>): Promise<void> {
    const entries = [...batch.values()];
    // Array text written here: node-postgres escapes each element of a JS array with two regular expressions.
    const arrays = [intArray([...batch.keys()], (key) => key), textArray(entries, (e) => e.name), textArray(entries, (e) => e.namespace)];
    return this.query(INSERT_NAMES, arrays).then(
      () => {
        this.retryMs = 0;
      },
      (err: { code?: string }) => {
        if (isSchemaMissing(err)) {
          this.disabled = true; // not migrated: inspect() shows keys without names
          this.pending.clear();
          this.logger.debug({ err }, 'pgfence: no name registry (run migrate() to see lock names in status)');
        } else {
          // Held up by another transaction (or the connection failed): write the batch again later.
          for (const [key, entry] of batch) if (!this.pending.has(key)) this.pending.set(key, entry);
          this.retryMs = Math.min(RETRY_MAX_MS, this.retryMs === 0 ? RETRY_FIRST_MS : this.retryMs * 2);
          this.logger.debug({ err, retryMs: this.retryMs }, 'pgfence: could not write lock names; trying again');
        }
      },
    );
  }
}
