import type { EventEmitter } from 'node:events';
import type { Logger } from './logger.js';
import type { Meter, MeterInstruments } from './metrics.js';
import { createInstruments } from './metrics.js';

export type LockKind = 'lock' | 'xact' | 'lease' | 'semaphore' | 'leader';
export type LockMode = 'exclusive' | 'shared';

/** What every lock event carries. */
export interface LockEventInfo {
  kind: LockKind;
  name: string | null;
  key: bigint;
  mode: LockMode;
}
export interface AcquiredEvent extends LockEventInfo {
  token: bigint | null;
  waitMs: number;
}
export interface ReleasedEvent extends LockEventInfo {
  token: bigint | null;
  holdMs: number;
}
export interface TimeoutEvent extends LockEventInfo {
  waitMs: number;
}
export interface LostEvent extends LockEventInfo {
  token: bigint | null;
  holdMs: number;
  reason: string;
  error: Error;
}
export type ContentionEvent = LockEventInfo;

/** Counters since the locker was created, plus what is held and waiting now. */
export interface LockerStats {
  acquired: number;
  released: number;
  timeouts: number;
  lost: number;
  contention: number;
  held: number;
  waiting: number;
  sessions: number;
}

/**
 * The one place lock life-cycle facts go: events on the locker, log lines, metrics and counters.
 * Lock code reports facts; it never formats a log line itself.
 */
export class Observer {
  private readonly counts = { acquired: 0, released: 0, timeouts: 0, lost: 0, contention: 0 };
  private readonly instruments: MeterInstruments | null;
  held = 0;

  constructor(
    private readonly emitter: EventEmitter,
    private readonly logger: Logger,
    meter: Meter | undefined,
    heldNow: () => number,
  ) {
    this.instruments = meter ? createInstruments(meter, heldNow) : null;
  }

  acquired(ev: AcquiredEvent): void {
    this.counts.acquired++;
    this.instruments?.acquired(ev);
    this.logger.debug(eventLog(ev, { token: ev.token, waitMs: round(ev.waitMs) }), 'pgfence: acquired');
    this.emitter.emit('acquired', ev);
  }

  released(ev: ReleasedEvent): void {
    this.counts.released++;
    this.instruments?.released(ev);
    this.logger.debug(eventLog(ev, { token: ev.token, holdMs: round(ev.holdMs) }), 'pgfence: released');
    this.emitter.emit('released', ev);
  }

  timeout(ev: TimeoutEvent): void {
    this.counts.timeouts++;
    this.instruments?.timeout(ev);
    this.logger.warn(eventLog(ev, { waitMs: round(ev.waitMs) }), 'pgfence: timed out waiting for lock');
    this.emitter.emit('timeout', ev);
  }

  lost(ev: LostEvent): void {
    this.counts.lost++;
    this.instruments?.lost(ev);
    this.logger.warn(
      eventLog(ev, { token: ev.token, holdMs: round(ev.holdMs), reason: ev.reason, err: ev.error }),
      'pgfence: lock lost',
    );
    this.emitter.emit('lost', ev);
  }

  contention(ev: ContentionEvent): void {
    this.counts.contention++;
    this.instruments?.contention(ev);
    this.logger.debug(eventLog(ev, {}), 'pgfence: lock busy, waiting');
    this.emitter.emit('contention', ev);
  }

  counters(): Omit<LockerStats, 'held' | 'waiting' | 'sessions'> {
    return { ...this.counts };
  }
}

function eventLog(ev: LockEventInfo, extra: Record<string, unknown>): Record<string, unknown> {
  // bigints are written as strings: JSON loggers cannot serialise them.
  const out: Record<string, unknown> = { kind: ev.kind, lock: ev.name, key: String(ev.key), mode: ev.mode };
  for (const [k, v] of Object.entries(extra)) out[k] = typeof v === 'bigint' ? String(v) : v;
  return out;
}

const round = (ms: number) => Math.round(ms * 1000) / 1000;
