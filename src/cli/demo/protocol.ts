/**
 * The demo's parent and its worker processes talk in JSON lines: commands on the worker's stdin,
 * events on its stdout. Times are Date.now() (the wall clock of this machine, shared by all
 * processes); tokens are decimal strings (JSON has no bigint).
 */

/** What the parent tells a worker (argv[2], JSON). */
export interface WorkerConfig {
  name: string;
  url: string;
  /** The lease every worker competes for. */
  lockName: string;
  ttlMs: number;
  /** Increments per lease holding. */
  jobsPerHold: number;
  /** "Work" between reading the counter and writing it back. */
  workMs: number;
  /** Pause between holdings, drawn in [min, max]. */
  idleMs: [number, number];
  fencedTable: string;
  controlTable: string;
  rowId: string;
  /** --pause block: the worker blocks its event loop until this file exists. */
  wakeFile: string;
}

/** Commands, one per stdin line. */
export type WorkerCommand = 'go' | 'stop' | 'quit' | 'block';

export interface FencedOutcome {
  applied: boolean;
  reason?: 'stale' | 'missing';
  currentToken?: string;
  /** The value it tried to write. */
  wanted: number;
  /** The row's value, read right after a refusal. */
  valueNow?: number;
}

export interface ControlOutcome {
  applied: boolean;
  wanted: number;
  /** The value the plain UPDATE replaced. */
  overwrote?: number;
  /** The token of the holder whose write it replaced. */
  overwroteToken?: string;
}

export type WorkerEvent =
  | { type: 'ready'; at: number; pid: number }
  | { type: 'granted'; at: number; token: string; expiresAt: number }
  | { type: 'read'; at: number; token: string; fenced: number; control: number }
  | {
      type: 'wrote';
      at: number;
      token: string;
      /** When it checked lease.signal.aborted before working out the value, and what it saw. */
      checkedAt: number;
      abortedAtCheck: boolean;
      /** When the writes were sent (after the work). */
      sentAt: number;
      doneAt: number;
      fenced: FencedOutcome;
      control: ControlOutcome;
    }
  /** lease.signal.aborted was true at a check: 'read' before starting an increment, 'write' before writing one. */
  | { type: 'noticed-loss'; at: number; token: string; before: 'read' | 'write' }
  | { type: 'lost'; at: number; token: string; error: string; code: string; reason: string }
  | { type: 'released'; at: number; token: string; released: boolean }
  | { type: 'blocking'; at: number }
  | { type: 'unblocked'; at: number }
  | { type: 'stopped'; at: number }
  | { type: 'error'; at: number; message: string };

export function parseEvent(line: string): WorkerEvent | null {
  try {
    const value = JSON.parse(line) as WorkerEvent;
    return typeof value === 'object' && value !== null && typeof value.type === 'string' ? value : null;
  } catch {
    return null;
  }
}
