import type { ControlOutcome, FencedOutcome } from './protocol.js';
import type { CounterRow } from './tables.js';

/** What happened during a demo run, as the workers reported it: the summary and the SVG are drawn from it. */

export interface WriteRecord {
  worker: string;
  token: bigint;
  /** When the holder checked its lease and sent both writes. */
  sentAt: number;
  doneAt: number;
  fenced: FencedOutcome;
  control: ControlOutcome;
  /** A newer token had been granted before the write was sent: the writer's lease was gone. */
  stale: boolean;
}

export interface Holding {
  worker: string;
  token: bigint;
  /** 1-based order of the grant. */
  index: number;
  grantedAt: number;
  /** The database's expiry as of the grant, on this machine's clock. */
  expiresAt: number;
  releasedAt?: number;
  /** What release() said: false when the lease was no longer the holder's. */
  released?: boolean;
  lostAt?: number;
  lostReason?: string;
  lostError?: string;
  noticedLossAt?: number;
  writes: WriteRecord[];
}

interface PauseRecord {
  worker: string;
  token: bigint;
  how: 'stop' | 'block';
  /** The value it read before it was frozen. */
  readValue: number;
  pausedAt: number;
  /** What /proc said about the process after SIGSTOP ('T' = stopped), when available. */
  procState?: string;
  /** When the database would let anyone else in (pgfence.leases.expires_at, on this machine's clock). */
  dbExpiresAt?: number;
  resumedAt?: number;
}

export interface DemoRecord {
  /** Date.now() when the demo started: every time shown is relative to it. */
  t0: number;
  workers: string[];
  ttlMs: number;
  holdings: Holding[];
  writes: WriteRecord[];
  pause?: PauseRecord;
  takeover?: { worker: string; token: bigint; at: number };
  /** The counters as the database holds them at the end. */
  final?: { fenced: CounterRow; control: CounterRow };
  endAt?: number;
}
