/**
 * One worker of `pgfence demo`, a process of its own (so it can really be frozen). It competes for a
 * lease and, while holding it, adds 1 to a shared counter again and again: read, work, write. Every
 * increment is written twice: with fencedUpdate() to the fenced table (the database checks the
 * token inside the UPDATE) and with a plain UPDATE to the control table. Like careful code does, it
 * checks lease.signal.aborted before working out each new value (reading the signal checks the
 * lease's deadline there and then); a pause after that check is what only fencing can catch.
 *
 * Started by the demo as `node worker.js <config JSON>`; events go to stdout as JSON lines.
 */
import { existsSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { LockLostError, within } from '../../core/index.js';
import { fencedUpdate } from '../../fencing/index.js';
import type { LeaseHandle } from '../../lease/index.js';
import { createLocker } from '../../locker.js';
import type { ControlOutcome, FencedOutcome, WorkerCommand, WorkerConfig, WorkerEvent } from './protocol.js';

const config = JSON.parse(process.argv[2] ?? '{}') as WorkerConfig;

function emit(event: WorkerEvent): void {
  process.stdout.write(`${JSON.stringify(event)}\n`);
}

const locker = createLocker({ connectionString: config.url, maxSessions: 1 });
const pool = new pg.Pool({ connectionString: config.url, max: 2, application_name: `pgfence_demo_${config.name}` });
pool.on('error', () => {}); // an idle connection dying must not crash the worker

let started = (): void => {};
const go = new Promise<void>((resolve) => (started = resolve));
const stop = new AbortController();
let quitting = false;

createInterface({ input: process.stdin }).on('line', (line) => {
  const command = line.trim() as WorkerCommand;
  if (command === 'go') started();
  else if (command === 'stop') stop.abort();
  else if (command === 'block') blockEventLoop();
  else if (command === 'quit') void quit(0);
});
// The parent went away: nothing left to show.
process.stdin.on('end', () => void quit(0));

/**
 * --pause block: a synchronous wait, as a long CPU-bound task or a stop-the-world GC would do. No
 * timer, no socket, no renewal runs until the demo creates the wake file.
 */
function blockEventLoop(): void {
  emit({ type: 'blocking', at: Date.now() });
  const cell = new Int32Array(new SharedArrayBuffer(4));
  while (!existsSync(config.wakeFile)) Atomics.wait(cell, 0, 0, 20);
  emit({ type: 'unblocked', at: Date.now() });
}

async function readCounters(): Promise<{ fenced: number; control: number }> {
  const [f, c] = await Promise.all([
    pool.query<{ value: number }>(`SELECT value FROM ${config.fencedTable} WHERE id = $1`, [config.rowId]),
    pool.query<{ value: number }>(`SELECT value FROM ${config.controlTable} WHERE id = $1`, [config.rowId]),
  ]);
  return { fenced: f.rows[0]!.value, control: c.rows[0]!.value };
}

async function writeFenced(lease: LeaseHandle, wanted: number): Promise<FencedOutcome> {
  const r = await fencedUpdate(pool, {
    table: config.fencedTable,
    set: { value: wanted, last_writer: config.name, writer_token: lease.token },
    where: { id: config.rowId },
    token: lease.token,
  });
  const out: FencedOutcome = { applied: r.applied, wanted };
  if (r.reason) out.reason = r.reason;
  if (r.currentToken !== undefined) out.currentToken = String(r.currentToken);
  if (!r.applied) {
    const { rows } = await pool.query<{ value: number }>(`SELECT value FROM ${config.fencedTable} WHERE id = $1`, [config.rowId]);
    if (rows[0]) out.valueNow = rows[0].value;
  }
  return out;
}

/** The same write without a guard; it also reports what it replaced. */
async function writeControl(lease: LeaseHandle, wanted: number): Promise<ControlOutcome> {
  const { rows } = await pool.query<{ overwrote: number; overwrote_token: string | null }>(
    `UPDATE ${config.controlTable} AS t
        SET value = $1, last_writer = $2, writer_token = $3
       FROM (SELECT value, writer_token FROM ${config.controlTable} WHERE id = $4 FOR UPDATE) AS before
      WHERE t.id = $4
  RETURNING before.value AS overwrote, before.writer_token::text AS overwrote_token`,
    [wanted, config.name, String(lease.token), config.rowId],
  );
  const row = rows[0];
  if (!row) return { applied: false, wanted };
  return { applied: true, wanted, overwrote: row.overwrote, ...(row.overwrote_token ? { overwroteToken: row.overwrote_token } : {}) };
}

async function hold(lease: LeaseHandle): Promise<void> {
  const token = String(lease.token);
  for (let job = 0; job < config.jobsPerHold; job++) {
    if (lease.signal.aborted) {
      emit({ type: 'noticed-loss', at: Date.now(), token, before: 'read' });
      return;
    }
    const read = await readCounters();
    // The check careful code makes before it commits to a write. It cannot see a pause that happens
    // after it: here, inside the work that produces the new value.
    const checkedAt = Date.now();
    const abortedAtCheck = lease.signal.aborted;
    if (abortedAtCheck) {
      emit({ type: 'noticed-loss', at: checkedAt, token, before: 'write' });
      return;
    }
    // The "work". Its timer is armed before anyone hears of the read, so a freeze that follows the
    // report always lands inside the work, after the check (and the timer is already due at wake-up).
    const work = sleep(config.workMs);
    emit({ type: 'read', at: Date.now(), token, ...read });
    await work;
    const sentAt = Date.now();
    const [fenced, control] = await Promise.all([writeFenced(lease, read.fenced + 1), writeControl(lease, read.control + 1)]);
    emit({ type: 'wrote', at: sentAt, token, checkedAt, abortedAtCheck, sentAt, doneAt: Date.now(), fenced, control });
  }
}

async function main(): Promise<void> {
  // Connect before the start signal, so every worker starts on an equal footing.
  await pool.query('SELECT 1');
  emit({ type: 'ready', at: Date.now(), pid: process.pid });
  await go;
  while (!stop.signal.aborted) {
    let lease: LeaseHandle;
    try {
      lease = await locker.lease(config.lockName, { ttlMs: config.ttlMs, owner: config.name, timeoutMs: 60_000, signal: stop.signal });
    } catch (err) {
      if (stop.signal.aborted) break;
      throw err;
    }
    const token = String(lease.token);
    emit({ type: 'granted', at: Date.now(), token, expiresAt: lease.expiresAt.getTime() });
    lease.signal.addEventListener(
      'abort',
      () => {
        const reason = lease.signal.reason as unknown;
        emit({
          type: 'lost',
          at: Date.now(),
          token,
          error: reason instanceof Error ? reason.name : 'Error',
          code: (reason as { code?: string } | null)?.code ?? '',
          reason: reason instanceof LockLostError ? reason.reason : String(reason),
        });
      },
      { once: true },
    );
    try {
      await hold(lease);
    } finally {
      // Stamped when the release is sent: the database lets the next holder in after that.
      const at = Date.now();
      const released = await lease.release();
      emit({ type: 'released', at, token, released });
    }
    if (stop.signal.aborted) break;
    const [min, max] = config.idleMs;
    await sleep(min + Math.random() * (max - min));
  }
  emit({ type: 'stopped', at: Date.now() });
}

async function quit(code: number): Promise<never> {
  if (!quitting) {
    quitting = true;
    stop.abort();
    await within(Promise.allSettled([locker.close(), pool.end()]), 3000);
  }
  process.exit(code);
}

main().catch((err: unknown) => {
  emit({ type: 'error', at: Date.now(), message: err instanceof Error ? err.message : String(err) });
  void quit(1);
});
