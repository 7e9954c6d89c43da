import type { LockEventInfo } from '../core/index.js';
import type { AcquiredEvent, BounceEvent, ContentionEvent, LostEvent, ReleasedEvent, TimeoutEvent } from './events.js';

/**
 * The part of @opentelemetry/api's Meter that pgfence uses, written out so that the package's
 * types do not require @opentelemetry/api to be installed. A real Meter satisfies it.
 *
 * @example
 * ```ts fragment
 * import { metrics } from '@opentelemetry/api';
 * const observed = createLocker({ connectionString: process.env.DATABASE_URL, meter: metrics.getMeter('pgfence') });
 * ```
 */
export interface Meter {
  createHistogram(name: string, options?: { description?: string; unit?: string }): {
    record(value: number, attributes?: Record<string, string>): void;
  };
  createCounter(name: string, options?: { description?: string; unit?: string }): {
    add(value: number, attributes?: Record<string, string>): void;
  };
  createObservableGauge(name: string, options?: { description?: string; unit?: string }): {
    addCallback(cb: (result: { observe(value: number, attributes?: Record<string, string>): void }) => void): void;
  };
}

export interface MeterInstruments {
  acquired(ev: AcquiredEvent): void;
  released(ev: ReleasedEvent): void;
  timeout(ev: TimeoutEvent): void;
  lost(ev: LostEvent): void;
  contention(ev: ContentionEvent): void;
  bounced(ev: BounceEvent): void;
}

/**
 * Instrument names, units and attributes follow OpenTelemetry conventions: dotted names, the unit in
 * `unit` (UCUM: `ms`; counts as `{annotation}`), low-cardinality attributes only. README's
 * Observability section lists each one; a test holds the two together.
 */
export function createInstruments(meter: Meter, heldNow: () => number): MeterInstruments {
  const wait = meter.createHistogram('pgfence.lock.wait', { unit: 'ms', description: 'Time from request to grant or timeout' });
  const hold = meter.createHistogram('pgfence.lock.hold', { unit: 'ms', description: 'Time from grant to release or loss' });
  const acquired = meter.createCounter('pgfence.lock.acquired', { unit: '{lock}', description: 'Locks granted' });
  const timeouts = meter.createCounter('pgfence.lock.timeouts', { unit: '{acquire}', description: 'Acquires that timed out' });
  const lost = meter.createCounter('pgfence.lock.lost', { unit: '{lock}', description: 'Held locks that were lost' });
  const contention = meter.createCounter('pgfence.lock.contention', { unit: '{acquire}', description: 'Acquires that found the lock busy' });
  const bounced = meter.createCounter('pgfence.pgboss.bounced', { unit: '{job}', description: 'pg-boss jobs returned to pg-boss because their key was busy' });
  const held = meter.createObservableGauge('pgfence.lock.held', { unit: '{lock}', description: 'Locks held by this locker now' });
  held.addCallback((result) => result.observe(heldNow()));
  // Lock names are unbounded: attributes carry the kind and mode only.
  const attrs = (ev: LockEventInfo) => ({ 'pgfence.kind': ev.kind, 'pgfence.mode': ev.mode });
  return {
    acquired(ev) {
      wait.record(ev.waitMs, { ...attrs(ev), 'pgfence.outcome': 'acquired' });
      acquired.add(1, attrs(ev));
    },
    released(ev) {
      hold.record(ev.holdMs, attrs(ev));
    },
    timeout(ev) {
      wait.record(ev.waitMs, { ...attrs(ev), 'pgfence.outcome': 'timeout' });
      timeouts.add(1, attrs(ev));
    },
    lost(ev) {
      hold.record(ev.holdMs, attrs(ev));
      lost.add(1, { ...attrs(ev), 'pgfence.reason': ev.reason });
    },
    contention(ev) {
      contention.add(1, attrs(ev));
    },
    bounced(ev) {
      bounced.add(1, attrs(ev));
    },
  };
}
