import { isSchemaMissing } from '../core/index.js';
import type { Logger } from './logger.js';

/** Remembers at most this many keys per process; beyond it, names are written again (harmlessly). */
const MAX_REMEMBERED = 100_000;
/**
 * How long notes gather after the first unflushed one before they are written together. Short, so
 * that another process sees a name soon after the grant (DESIGN: within ~50 ms); while a write is in
 * flight, new notes wait for it and go out together in the next one.
 */
const COALESCE_MS = 5;

/**
 * Committed asynchronously (synchronous_commit off for this statement's transaction alone): names are
 * best effort, and a durable commit would hold up the statements queued behind it on a pinned session.
 */
export const INSERT_NAMES = `INSERT INTO pgfence.lock_names (key, name, namespace)
SELECT n.key, n.name, n.namespace FROM unnest($1::int8[], $2::text[], $3::text[]) AS n(key, name, namespace)
WHERE set_config('synchronous_commit', 'off', true) IS NOT NULL
ON CONFLICT (key) DO NOTHING`;

/**
 * Writes lock names to pgfence.lock_names so that inspect() and `pgfence status` can show names for
 * the keys they find in pg_locks. Once per name per process, batched, in the background, through
 * `query` (the locker's idle waiter session, else a pool connection): it never adds a round trip to an
 * acquire. Without pgfence's schema it stays quiet.
 */
export class NameRegistry {
  private readonly seen = new Set<bigint>();
  private pending = new Map<bigint, { name: string; namespace: string | null }>();
  private timer: NodeJS.Timeout | null = null;
  private writing = false;
  private disabled = false;
  private flushing: Promise<void> = Promise.resolve();

  constructor(
    private readonly query: (text: string, values: unknown[]) => Promise<unknown>,
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

  /** A timer from the first unflushed note; none while a write is in flight (its end schedules the next). */
  private schedule(): void {
    if (this.timer || this.writing || this.pending.size === 0 || this.disabled) return;
    this.timer = setTimeout(() => void this.flush(), COALESCE_MS);
    this.timer.unref();
  }

  private write(batch: Map<bigint, { name: string; namespace: string | null }>): Promise<void> {
    const keys = [...batch.keys()];
    const entries = [...batch.values()];
    return this.query(INSERT_NAMES, [keys, entries.map((e) => e.name), entries.map((e) => e.namespace)]).then(
      () => {},
      (err: { code?: string }) => {
        if (isSchemaMissing(err)) {
          this.disabled = true; // not migrated: inspect() shows keys without names
          this.pending.clear();
          this.logger.debug({ err }, 'pgfence: no name registry (run migrate() to see lock names in status)');
        } else {
          for (const k of keys) this.seen.delete(k); // try again next time
          this.logger.debug({ err }, 'pgfence: could not write lock names');
        }
      },
    );
  }
}
