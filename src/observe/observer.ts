import type { EventEmitter } from 'node:events';
import { bigintAsString, type HeldLockInfo, type LockEventInfo, type LockLostError, type LockLostReason } from '../core/index.js';
import type { AcquiredEvent, BounceEvent, ContentionEvent, LockerEvents, LockerStats, LostEvent, ReleasedEvent, TimeoutEvent } from './events.js';
import { type Logger, logsAt } from './logger.js';
import { createInstruments, type Meter, type MeterInstruments } from './metrics.js';

/**
 * How pgfence/pg-boss reports a bounce through the locker it was given (the locker knows its
 * namespace, logger, meter and listeners). Not part of the public API.
 */
export const reportBounce: unique symbol = Symbol.for('pgfence.reportBounce');
export interface BounceReporter {
  [reportBounce](name: string, queue: string, jobId: string, waitMs: number | null): void;
}

/**
 * The one place lock life-cycle facts go: events on the locker, log lines, metrics and counters.
 * Lock code reports facts; it never formats a log line itself. Payloads are only built when a
 * listener, a logger or a meter will read them (the hot path of a silent locker stays cheap).
 */
export class Observer {
  private readonly counts = { acquired: 0, released: 0, timeouts: 0, lost: 0, contention: 0 };
  private readonly instruments: MeterInstruments | null;

  constructor(
    private readonly emitter: EventEmitter<LockerEvents>,
    private readonly logger: Logger,
    meter: Meter | undefined,
    heldNow: () => number,
  ) {
    this.instruments = meter ? createInstruments(meter, heldNow) : null;
  }

  /** Debug lines (every acquisition and release) only when the logger takes them: their payloads are built for it alone. */
  private get logs(): boolean {
    return logsAt(this.logger, 'debug');
  }

  private wanted(event: keyof LockerEvents): boolean {
    return this.logs || this.instruments !== null || this.emitter.listenerCount(event) > 0;
  }

  acquired(lock: HeldLockInfo, waitMs: number): void {
    this.counts.acquired++;
    if (!this.wanted('acquired')) return;
    const ev: AcquiredEvent = { ...snapshot(lock), token: lock.token, waitMs };
    this.instruments?.acquired(ev);
    if (this.logs) this.logger.debug(eventLog(ev, { token: ev.token, waitMs: round(waitMs) }), 'pgfence: acquired');
    this.emitter.emit('acquired', ev);
  }

  released(lock: HeldLockInfo & { readonly holdMs: number }): void {
    this.counts.released++;
    if (!this.wanted('released')) return;
    const holdMs = lock.holdMs;
    const ev: ReleasedEvent = { ...snapshot(lock), token: lock.token, holdMs };
    this.instruments?.released(ev);
    if (this.logs) this.logger.debug(eventLog(ev, { token: ev.token, holdMs: round(holdMs) }), 'pgfence: released');
    this.emitter.emit('released', ev);
  }

  timeout(lock: LockEventInfo, waitMs: number): void {
    this.counts.timeouts++;
    const ev: TimeoutEvent = { ...snapshot(lock), waitMs };
    this.instruments?.timeout(ev);
    this.logger.warn(eventLog(ev, { waitMs: round(waitMs) }), 'pgfence: timed out waiting for lock');
    this.emitter.emit('timeout', ev);
  }

  lost(lock: HeldLockInfo, holdMs: number, reason: LockLostReason, error: LockLostError): void {
    this.counts.lost++;
    const ev: LostEvent = { ...snapshot(lock), token: lock.token, holdMs, reason, error };
    this.instruments?.lost(ev);
    this.logger.warn(eventLog(ev, { token: ev.token, holdMs: round(holdMs), reason, err: error }), 'pgfence: lock lost');
    this.emitter.emit('lost', ev);
  }

  contention(lock: LockEventInfo): void {
    this.counts.contention++;
    if (!this.wanted('contention')) return;
    const ev: ContentionEvent = snapshot(lock);
    this.instruments?.contention(ev);
    if (this.logs) this.logger.debug(eventLog(ev, {}), 'pgfence: lock busy, waiting');
    this.emitter.emit('contention', ev);
  }

  bounced(lock: LockEventInfo, queue: string, jobId: string, waitMs: number | null): void {
    const ev: BounceEvent = { ...snapshot(lock), queue, jobId, waitMs };
    this.instruments?.bounced(ev);
    this.logger.warn(
      eventLog(ev, { queue, jobId, waitMs: waitMs === null ? null : round(waitMs) }),
      'pgfence: job returned to pg-boss for a retry: its key is busy',
    );
    this.emitter.emit('bounce', ev);
  }

  counters(): Omit<LockerStats, 'held' | 'waiting' | 'sessions'> {
    return { ...this.counts };
  }
}

function snapshot(lock: LockEventInfo): LockEventInfo {
  return { kind: lock.kind, name: lock.name, key: lock.key, mode: lock.mode };
}

function eventLog(ev: LockEventInfo, extra: Record<string, unknown>): Record<string, unknown> {
  // bigints are written as strings: JSON loggers cannot serialise them.
  const out: Record<string, unknown> = { kind: ev.kind, lock: ev.name, key: String(ev.key), mode: ev.mode };
  for (const [k, v] of Object.entries(extra)) out[k] = bigintAsString(k, v);
  return out;
}

const round = (ms: number) => Math.round(ms * 1000) / 1000;
