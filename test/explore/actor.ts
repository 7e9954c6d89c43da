/**
 * One actor: a locker of one kind (an incarnation of it: a close ends it) driven by commands, in this
 * process or in a child process (./child.ts). It records every call with its invocation and
 * completion, every grant and how it ended, and while it holds a lock it acts on it: it reads its
 * belief (as an application about to act would) every few tens of ms, and now and then makes a fenced
 * write with its token.
 */
import type { Kysely } from 'kysely';
import pg from 'pg';
import { fencedUpdate, PgfenceError } from '../../src/index.js';
import * as kyselyLocks from '../../src/adapters/kysely/index.js';
import type { ErrorInfo, HoldRecord, Mode, OpName, OpRecord, Recorded, WriteRecord } from './history.js';
import { now } from './history.js';
import { detectionBoundMs, type KindAdapter, type KindContext, type KindHold, type KindLocker, type WriteExecutor, type WriteOutcome } from './kinds/index.js';
import { isDriverError, rawClientConfig, statementGuardMs } from './kinds/kind.js';

export type ActorCommand =
  | { op: 'acquire'; name: string; mode: Mode; timeoutMs: number; abortAfterMs?: number }
  | { op: 'try'; name: string; mode: Mode }
  | { op: 'release' }
  | { op: 'renew' }
  | { op: 'write' }
  | { op: 'close' };

/**
 * idle: nothing held or asked; busy: a call in flight; holding: a lock held; lost: the held lock was
 * lost (the next command releases it); closed: the locker was closed (calls are refused).
 */
export type ActorState = 'opening' | 'idle' | 'busy' | 'holding' | 'lost' | 'closed';

export interface ActorOptions {
  kind: KindAdapter;
  id: string;
  ctx: KindContext;
  /** Added to every call's bound: scheduling on a loaded machine (not a figure of the library's). */
  slackMs: number;
  actEveryMs: number;
  /** Every this many acts, a fenced write (holds with a token). */
  writeEvery: number;
  emit(r: Recorded): void;
  /** Tells the controller the state changed (a child sends it over IPC). */
  onState(state: ActorState): void;
}

/** The table the fenced writes go to, and the database's own log of the writes it applied (a trigger). */
export const WRITES_TABLE = 'explore_writes';

export class ActorHost {
  private locker: KindLocker | null = null;
  private state: ActorState = 'opening';
  private hold: { record: HoldRecord; kind: KindHold } | null = null;
  private counter = 0;
  private actTimer: NodeJS.Timeout | null = null;
  private acting = false;
  private acts = 0;
  private writing = false;
  private writePool: pg.Pool | null = null;
  private closing = false;

  constructor(private readonly o: ActorOptions) {}

  private nextId(prefix: string): string {
    return `${this.o.id}:${prefix}${++this.counter}`;
  }

  private setState(state: ActorState): void {
    // A closed incarnation stays closed (a new one replaces it); while closing, only 'closed' comes next.
    if (this.state === 'closed' || (this.closing && state !== 'closed' && state !== 'busy')) return;
    this.state = state;
    this.o.onState(state);
  }

  private bound(op: OpName, timeoutMs = 0): number {
    if (op === 'write') return statementGuardMs(this.o.ctx.keepaliveMs) + this.o.slackMs;
    return timeoutMs + detectionBoundMs(this.o.ctx.keepaliveMs) + this.o.slackMs;
  }

  /** Records a call around `fn`; resolves with its value, or undefined when it threw (recorded). */
  private async call<T>(op: OpName, fields: Partial<OpRecord>, fn: (record: OpRecord) => Promise<T>, callerReason?: unknown): Promise<{ value?: T; failed: boolean }> {
    const record: OpRecord = { id: this.nextId('op'), actor: this.o.id, kind: this.o.kind.kind, op, invokedAt: now(), boundMs: this.bound(op, fields.timeoutMs), ...fields };
    this.o.emit({ type: 'op', record: { ...record } });
    try {
      const value = await fn(record);
      record.settledAt = now();
      record.outcome ??= value === null ? 'null' : 'ok';
      return { value, failed: false };
    } catch (err) {
      record.settledAt = now();
      record.outcome = 'error';
      record.error = errorInfo(err, callerReason);
      return { failed: true };
    } finally {
      this.o.emit({ type: 'op', record: { ...record } });
    }
  }

  async open(): Promise<void> {
    const { value } = await this.call('open', {}, () => this.o.kind.open(this.o.ctx));
    this.locker = value ?? null;
    this.setState(this.locker ? 'idle' : 'closed');
  }

  /** Runs a command in the background; the controller sends only commands that fit the state (and, now and then, one on a closed locker). */
  command(cmd: ActorCommand): void {
    // The state again once the command is done, also when it did nothing: the controller marked the actor busy meanwhile.
    void this.run(cmd).finally(() => this.o.onState(this.state));
  }

  private async run(cmd: ActorCommand): Promise<void> {
    switch (cmd.op) {
      case 'acquire':
      case 'try':
        return this.acquire(cmd);
      case 'release':
        return this.release();
      case 'renew':
        return this.renew();
      case 'write':
        return this.write();
      case 'close':
        return this.close();
    }
  }

  private async acquire(cmd: Extract<ActorCommand, { op: 'acquire' | 'try' }>): Promise<void> {
    const locker = this.locker;
    if (!locker || (this.state !== 'idle' && this.state !== 'closed')) return;
    const wasClosed = this.state === 'closed';
    if (!wasClosed) this.setState('busy');
    const timeoutMs = cmd.op === 'try' ? null : cmd.timeoutMs;
    const abortAfterMs = cmd.op === 'acquire' ? cmd.abortAfterMs : undefined;
    const controller = abortAfterMs === undefined ? null : new AbortController();
    const reason = new Error('explore: the caller aborted');
    const abortTimer = controller && setTimeout(() => controller.abort(reason), abortAfterMs);
    const requestedAt = now();
    const fields: Partial<OpRecord> = { name: cmd.name, mode: cmd.mode, timeoutMs: timeoutMs ?? undefined, abortAfterMs };
    const { value: hold } = await this.call(
      cmd.op,
      fields,
      async (record) => {
        // Recorded at once: a call that never settles says whether it got as far as pgfence.
        const started = () => {
          record.invokedAt = record.calledAt = now();
          this.o.emit({ type: 'op', record: { ...record } });
        };
        const granted = await locker.acquire({ name: cmd.name, mode: cmd.mode, timeoutMs, signal: controller?.signal, started });
        if (granted) record.hold = this.granted(granted, cmd.name, cmd.mode, requestedAt);
        return granted;
      },
      reason,
    );
    if (abortTimer) clearTimeout(abortTimer);
    if (wasClosed) {
      // A closed locker granted something: give it back (the checker sees the grant in the history).
      if (hold) await this.endHold('released');
      return;
    }
    // Granted while the locker closes: close() gives it back (the check after close sees whether it did).
    if (this.closing) return void (hold && (await this.endHold('closed')));
    if ((this.state as ActorState) === 'busy') this.setState(hold ? 'holding' : 'idle');
  }

  private granted(kindHold: KindHold, name: string, mode: Mode, requestedAt: number): string {
    const record: HoldRecord = {
      id: this.nextId('h'),
      actor: this.o.id,
      kind: this.o.kind.kind,
      family: this.o.kind.family,
      name,
      mode,
      token: kindHold.token,
      tokenDurable: kindHold.tokenDurable,
      requestedAt,
      grantedAt: now(),
    };
    this.hold = { record, kind: kindHold };
    this.acts = 0;
    this.o.emit({ type: 'hold', record: { ...record } });
    kindHold.onLost((reason) => this.lost(record, reason));
    this.actTimer ??= setInterval(() => void this.act(), this.o.actEveryMs);
    return record.id;
  }

  private lost(record: HoldRecord, reason: string): void {
    if (record.end !== undefined) return;
    record.lostAt = now();
    record.lostReason = reason;
    record.end = 'lost';
    record.endedAt = record.lostAt;
    this.o.emit({ type: 'hold', record: { ...record } });
    if (this.hold?.record === record && this.state === 'holding') this.setState('lost');
  }

  private async act(): Promise<void> {
    const hold = this.hold;
    if (!hold || hold.record.end !== undefined || this.acting) return;
    this.acting = true;
    try {
      const from = now();
      const belief = await hold.kind.believe();
      const to = now();
      if (!belief) return this.lost(hold.record, 'not believed');
      if (hold.record.end !== undefined) return;
      this.o.emit({ type: 'act', record: { hold: hold.record.id, from, to } });
      // A write on the first act, then every few.
      if (this.acts++ % this.o.writeEvery === 0) void this.write();
    } catch {
      // believe() of a statement failed: the next act (or the hold's loss notice) says so.
    } finally {
      this.acting = false;
    }
  }

  private async write(): Promise<void> {
    const hold = this.hold;
    if (!hold || hold.record.token === null || hold.record.mode !== 'exclusive' || this.writing || hold.record.end !== undefined) return;
    this.writing = true;
    const token = hold.record.token;
    const record: WriteRecord = { id: this.nextId('w'), hold: hold.record.id, name: hold.record.name, token, invokedAt: now() };
    this.o.emit({ type: 'write', record: { ...record } });
    const run = (exec: WriteExecutor): Promise<WriteOutcome> => runWrite(exec, { table: WRITES_TABLE, set: { body: record.id }, where: { name: record.name }, token });
    await this.call('write', { name: record.name }, async () => {
      const outcome = await (hold.kind.write ? hold.kind.write(run) : run({ pg: this.pool() }));
      record.applied = outcome.applied;
      record.currentToken = outcome.currentToken;
      return outcome;
    });
    record.settledAt = now();
    this.o.emit({ type: 'write', record: { ...record } });
    this.writing = false;
  }

  private pool(): pg.Pool {
    if (!this.writePool) {
      this.writePool = new pg.Pool({ ...rawClientConfig(this.o.ctx.directUrl, statementGuardMs(this.o.ctx.keepaliveMs)), max: 1 });
      this.writePool.on('error', () => {});
    }
    return this.writePool;
  }

  private async renew(): Promise<void> {
    const hold = this.hold;
    if (!hold?.kind.renew || this.state !== 'holding') return;
    await this.call('renew', { name: hold.record.name }, async (record) => {
      const renewed = await hold.kind.renew!();
      record.value = renewed;
      return renewed;
    });
  }

  private async release(): Promise<void> {
    if (!this.hold || (this.state !== 'holding' && this.state !== 'lost')) return;
    this.setState('busy');
    await this.endHold('released');
    if ((this.state as ActorState) === 'busy') this.setState('idle');
  }

  private async endHold(end: 'released' | 'closed'): Promise<void> {
    const hold = this.hold;
    if (!hold) return;
    this.hold = null;
    this.stopActing();
    const record = hold.record;
    if (end === 'closed') {
      if (record.end === undefined) {
        record.end = 'closed';
        record.endedAt = now();
        this.o.emit({ type: 'hold', record: { ...record } });
      }
      return;
    }
    await this.call('release', { name: record.name }, async (op) => {
      record.releaseInvokedAt = now();
      if (record.end === undefined) {
        record.end = 'released';
        record.endedAt = record.releaseInvokedAt;
      }
      try {
        const { released, durable } = await hold.kind.release();
        op.value = released;
        record.released = released;
        if (durable) record.tokenDurable = true;
        return released;
      } finally {
        record.releaseSettledAt = now();
        this.o.emit({ type: 'hold', record: { ...record } });
      }
    });
  }

  private stopActing(): void {
    if (this.actTimer) clearInterval(this.actTimer);
    this.actTimer = null;
  }

  async close(): Promise<void> {
    const locker = this.locker;
    if (!locker || this.closing || this.state === 'closed') return;
    this.closing = true;
    this.setState('busy');
    await this.endHold('closed');
    await this.call('close', {}, () => locker.close());
    await this.writePool?.end().catch(() => {});
    this.writePool = null;
    this.setState('closed');
  }
}

function runWrite(exec: WriteExecutor, spec: Parameters<typeof fencedUpdate>[1]): Promise<WriteOutcome> {
  if ('pg' in exec) return fencedUpdate(exec.pg, spec);
  // The tables are created at run time: untyped for the compiler.
  return kyselyLocks.fencedUpdate(exec.kysely as Kysely<any>, spec);
}

export function errorInfo(err: unknown, callerReason?: unknown): ErrorInfo {
  const e = err as { name?: unknown; code?: unknown; message?: unknown } | null;
  return {
    name: typeof e?.name === 'string' ? e.name : typeof err,
    code: typeof e?.code === 'string' ? e.code : undefined,
    message: typeof e?.message === 'string' ? e.message : String(err),
    typed: err instanceof PgfenceError,
    origin: err === callerReason ? 'caller' : isDriverError(err) ? 'driver' : 'pgfence',
  };
}
