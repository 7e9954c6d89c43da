import { spawn, type ChildProcess } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { lockKey } from '../../index.js';
import { sleep, TIMED_OUT, within } from '../../core/index.js';
import { parseEvent, type WorkerCommand, type WorkerConfig, type WorkerEvent } from './protocol.js';
import type { DemoRecord, Holding } from './record.js';
import { CONTROL_TABLE, FENCED_TABLE, leaseExpiry, readCounters, ROW_ID } from './tables.js';

export interface ScenarioOptions {
  url: string;
  workers: number;
  pause: 'stop' | 'block';
  ttlMs: number;
  workMs: number;
  jobsPerHold: number;
  /** The grant (1-based) whose holder is frozen. */
  victimGrant: number;
  /** Holdings completed by the others after the takeover, before the frozen one is resumed. */
  holdsAfterTakeover: number;
  /** Database clock minus local clock. */
  clockOffsetMs: number;
  /** Where --pause block's wake file goes. */
  wakeFile: string;
  /** The parent's own connection (inspection and final reads). */
  client: pg.Client;
  /** Aborted on Ctrl-C. */
  signal: AbortSignal;
  narrator: Narrator;
}

/** Lines of the story, as things happen. */
export interface Narrator {
  /** `who` is a worker name, 'db' or 'demo'; tone colours the text. */
  say(at: number, who: string, text: string, tone?: Tone): void;
}
export type Tone = 'plain' | 'good' | 'bad' | 'warn' | 'note' | 'strong';

export const LOCK_NAME = 'pgfence-demo:counter';

interface Waiter {
  check: () => boolean;
  resolve: () => void;
  reject: (err: Error) => void;
}

class WorkerProcess {
  readonly stderr: string[] = [];
  stopped = false;
  exited = false;
  readonly exit: Promise<void>;

  constructor(
    readonly name: string,
    readonly child: ChildProcess,
  ) {
    this.exit = new Promise((resolve) => child.once('exit', () => resolve()));
    child.once('exit', () => {
      this.exited = true;
    });
    child.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
      this.stderr.push(...chunk.trimEnd().split('\n'));
      if (this.stderr.length > 20) this.stderr.splice(0, this.stderr.length - 20);
    });
    child.stdin!.on('error', () => {}); // a worker that died: its exit is reported instead
  }

  send(command: WorkerCommand): void {
    if (!this.exited && this.child.stdin!.writable) this.child.stdin!.write(`${command}\n`);
  }
}

/**
 * The story, played for real: worker processes compete for one lease and increment a shared counter
 * (twice: fenced and unfenced); the holder of the `victimGrant`-th grant is frozen right after it read
 * the counter, until its lease has expired in the database and the others have moved on; then it is
 * resumed and writes its stale value.
 */
export class Scenario {
  readonly record: DemoRecord;
  private readonly workers: WorkerProcess[] = [];
  private readonly waiters = new Set<Waiter>();
  private failure: Error | null = null;
  private victim: WorkerProcess | null = null;
  private readonly current = new Map<string, Holding>();
  private ready = 0;
  private quitting = false;
  /** Lines about the frozen holder after it wakes, printed in time order once it has released. */
  private wakeLines: { at: number; text: () => string; tone: Tone }[] = [];

  constructor(
    private readonly o: ScenarioOptions,
    t0: number,
  ) {
    this.record = { t0, workers: [], ttlMs: o.ttlMs, holdings: [], writes: [] };
    o.signal.addEventListener('abort', () => this.fail(new Error('interrupted')), { once: true });
  }

  async run(): Promise<void> {
    const o = this.o;
    const say = o.narrator.say.bind(o.narrator);
    const script = fileURLToPath(new URL('./worker.js', import.meta.url));
    for (let i = 1; i <= o.workers; i++) {
      const name = `W${i}`;
      const config: WorkerConfig = {
        name,
        url: o.url,
        lockName: LOCK_NAME,
        ttlMs: o.ttlMs,
        jobsPerHold: o.jobsPerHold,
        workMs: o.workMs,
        idleMs: [120, 320],
        fencedTable: FENCED_TABLE,
        controlTable: CONTROL_TABLE,
        rowId: ROW_ID,
        wakeFile: o.wakeFile,
      };
      const child = spawn(process.execPath, [script, JSON.stringify(config)], { stdio: ['pipe', 'pipe', 'pipe'] });
      const worker = new WorkerProcess(name, child);
      this.workers.push(worker);
      this.record.workers.push(name);
      createInterface({ input: child.stdout! }).on('line', (line) => {
        const event = parseEvent(line);
        if (event) this.onEvent(worker, event);
      });
      child.once('exit', (code, sig) => {
        if (!this.quitting) {
          const tail = worker.stderr.length ? `\n${worker.stderr.join('\n')}` : '';
          this.fail(new Error(`worker ${name} exited unexpectedly (${sig ?? `code ${code}`})${tail}`));
        }
        this.poke();
      });
      child.once('error', (err) => this.fail(new Error(`worker ${name} could not start: ${err.message}`)));
    }

    await this.waitFor(() => this.ready === o.workers, 30_000, 'the workers to connect');
    say(Date.now(), 'demo', `${o.workers} worker processes are connected (${this.workers.map((w) => `${w.name}: pid ${w.child.pid}`).join(', ')}). Go!`);
    for (const w of this.workers) w.send('go');

    await this.waitFor(() => this.record.pause?.dbExpiresAt !== undefined, 60_000, 'a holder to freeze');
    await this.waitFor(() => this.record.takeover !== undefined, o.ttlMs + 30_000, 'another worker to take the lease over');
    const takeover = this.record.takeover!;
    await this.waitFor(
      () => this.record.holdings.filter((h) => h.token >= takeover.token && h.releasedAt !== undefined).length >= o.holdsAfterTakeover,
      60_000,
      'the others to work on',
    );

    const victim = this.victim!;
    const others = this.workers.filter((w) => w !== victim);
    for (const w of others) w.send('stop');
    await this.waitFor(() => others.every((w) => w.stopped), 30_000, 'the other workers to stop');
    const now = await readCounters(o.client);
    say(
      Date.now(),
      'demo',
      `${others.map((w) => w.name).join(', ')} stop. The counter is ${now.fenced.value} in the fenced table and ${now.control.value} in the control table.`,
    );

    const pause = this.record.pause!;
    if (pause.how === 'stop') victim.child.kill('SIGCONT');
    else await writeFile(o.wakeFile, 'wake\n');
    pause.resumedAt = Date.now();
    say(
      pause.resumedAt,
      'demo',
      `${pause.how === 'stop' ? 'Sends SIGCONT to' : 'Unblocks the event loop of'} ${victim.name}, after ${((pause.resumedAt - pause.pausedAt) / 1000).toFixed(1)} s frozen.`,
      'strong',
    );
    const victimHolding = this.record.holdings.find((h) => h.token === pause.token)!;
    await this.waitFor(() => victimHolding.releasedAt !== undefined, 30_000, `${victim.name} to finish`);
    for (const line of this.wakeLines.sort((a, b) => a.at - b.at)) say(line.at, victim.name, line.text(), line.tone);
    this.wakeLines = [];
    victim.send('stop');
    await this.waitFor(() => victim.stopped, 30_000, `${victim.name} to stop`);
    this.record.final = await readCounters(o.client);
    this.record.endAt = Date.now();
  }

  /** Ends every worker process (also the frozen one, also after a failure). */
  async shutdown(): Promise<void> {
    this.quitting = true;
    for (const w of this.workers) {
      if (w.exited) continue;
      // Still frozen (stopped, or blocked until a wake file that will not come): nothing to wait for.
      if (w === this.victim && this.record.pause && this.record.pause.resumedAt === undefined) w.child.kill('SIGKILL');
      else w.send('quit');
    }
    const all = Promise.all(this.workers.map((w) => w.exit));
    if ((await within(all, 5000)) === TIMED_OUT) {
      for (const w of this.workers) if (!w.exited) w.child.kill('SIGKILL');
      await all;
    }
  }

  /** SIGKILL at once (second Ctrl-C). */
  killNow(): void {
    for (const w of this.workers) if (!w.exited) w.child.kill('SIGKILL');
  }

  // ---- events ----

  private onEvent(worker: WorkerProcess, ev: WorkerEvent): void {
    try {
      this.handle(worker, ev);
    } catch (err) {
      this.fail(err as Error);
    }
    this.poke();
  }

  private handle(worker: WorkerProcess, ev: WorkerEvent): void {
    const say = this.o.narrator.say.bind(this.o.narrator);
    const r = this.record;
    const pause = r.pause;
    const isVictim = pause !== undefined && worker.name === pause.worker;
    const afterWake = isVictim && pause.resumedAt !== undefined;
    switch (ev.type) {
      case 'ready':
        this.ready++;
        return;
      case 'granted': {
        const token = BigInt(ev.token);
        const holding: Holding = {
          worker: worker.name,
          token,
          index: r.holdings.length + 1,
          grantedAt: ev.at,
          expiresAt: ev.expiresAt - this.o.clockOffsetMs,
          writes: [],
        };
        r.holdings.push(holding);
        this.current.set(worker.name, holding);
        if (holding.index === this.o.victimGrant) this.victim = worker;
        if (pause && !r.takeover && token > pause.token) {
          r.takeover = { worker: worker.name, token, at: ev.at };
          const expired = pause.dbExpiresAt === undefined ? '' : ` at ${rel(pause.dbExpiresAt - r.t0)}`;
          say(
            ev.at,
            worker.name,
            `lease granted, token ${token}. The database let ${worker.name} in because ${pause.worker}'s lease ran out${expired}. ` +
              `${pause.worker} is still frozen and still believes it holds token ${pause.token}.`,
            'strong',
          );
        } else {
          say(ev.at, worker.name, `lease granted, token ${token}`);
        }
        return;
      }
      case 'read': {
        const holding = this.current.get(worker.name);
        if (!pause && holding && this.victim === worker && holding.index === this.o.victimGrant) {
          void this.freeze(worker, holding, ev.fenced, ev.at).catch((err: Error) => this.fail(err));
        }
        return;
      }
      case 'blocking':
        return;
      case 'unblocked':
        return;
      case 'wrote': {
        const token = BigInt(ev.token);
        const newest = r.holdings.filter((h) => h.grantedAt <= ev.sentAt).reduce((m, h) => (h.token > m ? h.token : m), 0n);
        const write = {
          worker: worker.name,
          token,
          sentAt: ev.sentAt,
          doneAt: ev.doneAt,
          fenced: ev.fenced,
          control: ev.control,
          stale: newest > token,
        };
        r.writes.push(write);
        this.current.get(worker.name)?.writes.push(write);
        if (afterWake) this.narrateStaleWrite(write.sentAt, ev);
        else if (write.stale || !ev.fenced.applied || !ev.control.applied) {
          say(ev.at, worker.name, `unexpected: a write with token ${token} (fenced ${describeFenced(ev.fenced)}, control ${ev.control.applied ? 'applied' : 'not applied'})`, 'warn');
        }
        return;
      }
      case 'noticed-loss': {
        const holding = this.current.get(worker.name);
        if (holding) holding.noticedLossAt = ev.at;
        const text =
          ev.before === 'write'
            ? `checks lease.signal.aborted before writing: true. It knows it lost the lease, and does not write.`
            : `moves on to its next increment and checks lease.signal.aborted first: true. Now it knows, and stops.`;
        if (afterWake) this.wakeLines.push({ at: ev.at, text: () => text, tone: 'note' });
        else say(ev.at, worker.name, text, 'warn');
        return;
      }
      case 'lost': {
        const holding = this.current.get(worker.name);
        if (holding) {
          holding.lostAt = ev.at;
          holding.lostReason = ev.reason;
          holding.lostError = ev.error;
        }
        if (afterWake) {
          this.wakeLines.push({
            at: ev.at,
            // Written once the whole wake-up is known: the writes' report may arrive after this event.
            text: () => {
              const sent = holding?.writes.find((w) => w.stale)?.sentAt;
              const late =
                sent !== undefined && sent <= ev.at
                  ? `, ${Math.max(0, ev.at - sent)} ms after its writes were sent: too late to stop them`
                  : '';
              return `lease.signal aborts with ${ev.error} (${ev.reason}): its own timers have run at last${late}.`;
            },
            tone: 'note',
          });
        } else say(ev.at, worker.name, `lost its lease: ${ev.error} (${ev.reason})`, 'warn');
        return;
      }
      case 'released': {
        const holding = this.current.get(worker.name);
        this.current.delete(worker.name);
        if (!holding) return;
        holding.releasedAt = ev.at;
        holding.released = ev.released;
        if (afterWake) {
          const since = ev.released ? '' : `: the lease stopped being ${worker.name}'s at ${rel((pause.dbExpiresAt ?? r.takeover?.at ?? ev.at) - r.t0)}`;
          this.wakeLines.push({ at: ev.at, text: () => `release() returns ${ev.released}${since}.`, tone: 'plain' });
          return;
        }
        const values = holding.writes.map((w) => w.fenced.wanted);
        const text =
          values.length === 0
            ? `released the lease (token ${holding.token}) without writing`
            : `counter ${[values[0]! - 1, ...values].join(' -> ')} in both tables; released`;
        say(ev.at, worker.name, text, 'plain');
        return;
      }
      case 'stopped':
        worker.stopped = true;
        return;
      case 'error':
        throw new Error(`worker ${worker.name}: ${ev.message}${worker.stderr.length ? `\n${worker.stderr.join('\n')}` : ''}`);
    }
  }

  /** Freezes the holder that has just read the counter, for real. */
  private async freeze(worker: WorkerProcess, holding: Holding, readValue: number, readAt: number): Promise<void> {
    const say = this.o.narrator.say.bind(this.o.narrator);
    const how = this.o.pause;
    const pause = { worker: worker.name, token: holding.token, how, readValue, pausedAt: Date.now() } as NonNullable<DemoRecord['pause']>;
    this.record.pause = pause;
    if (how === 'stop') {
      worker.child.kill('SIGSTOP');
      pause.pausedAt = Date.now();
      const state = await procState(worker.child.pid!);
      if (state) pause.procState = state;
    } else {
      worker.send('block');
      pause.pausedAt = Date.now();
    }
    say(readAt, worker.name, `read counter = ${readValue}, and starts working out ${readValue + 1}...`);
    const what =
      how === 'stop'
        ? `the demo freezes it with SIGSTOP${pause.procState ? ` (the kernel now shows it as state ${pause.procState}${pause.procState === 'T' ? ', stopped' : ''})` : ''}.`
        : `its event loop is blocked (a synchronous Atomics.wait, like a long CPU-bound task).`;
    say(
      pause.pausedAt,
      worker.name,
      `FROZEN: ${what} A long GC pause, a VM migration or heavy swapping does the same. Its timers, lease renewals and ` +
        `lease checks are frozen with it.`,
      'warn',
    );
    const expires = await leaseExpiry(this.o.client, lockKey(LOCK_NAME), holding.token);
    pause.dbExpiresAt = expires ? expires.getTime() - this.o.clockOffsetMs : holding.expiresAt;
    say(
      Date.now(),
      'db',
      `${worker.name}'s lease (token ${holding.token}) runs out at ${rel(pause.dbExpiresAt - this.record.t0)} on the database clock, ` +
        `unless ${worker.name} renews it. It cannot.`,
    );
    this.poke();
  }

  private narrateStaleWrite(sentAt: number, ev: Extract<WorkerEvent, { type: 'wrote' }>): void {
    this.wakeLines.push({
      at: sentAt,
      text: () =>
        `finishes the work it was frozen in. It had checked lease.signal.aborted just before that work: ${ev.abortedAtCheck}. ` +
        `The freeze came after the check, so nothing told it the lease was gone. It writes counter = ${ev.fenced.wanted} to both tables.`,
      tone: 'plain',
    });
    const f = ev.fenced;
    if (f.applied) {
      this.wakeLines.push({ at: ev.doneAt, text: () => `fenced table: APPLIED (the fence did not hold!)`, tone: 'bad' });
    } else {
      const row = f.currentToken ? `token ${f.currentToken} in the row` : 'a newer token in the row';
      const stays = f.valueNow === undefined ? '' : ` The counter stays ${f.valueNow}.`;
      this.wakeLines.push({
        at: ev.doneAt,
        text: () => `fenced table: REFUSED. fencedUpdate found ${row}, newer than ${ev.token}: a stale write, and PostgreSQL turned it away.${stays}`,
        tone: 'good',
      });
    }
    const c = ev.control;
    if (c.applied && c.overwrote !== undefined) {
      const whose = c.overwroteToken ? ` (written with token ${c.overwroteToken})` : '';
      const lost = c.overwrote - c.wanted + 1;
      this.wakeLines.push({
        at: ev.doneAt,
        text: () =>
          `control table: APPLIED. The plain UPDATE silently replaced ${c.overwrote}${whose} with ${c.wanted}: ` +
          `${lost} increment${lost === 1 ? '' : 's'} by the new holders ${lost === 1 ? 'is' : 'are'} gone.`,
        tone: 'bad',
      });
    } else {
      this.wakeLines.push({ at: ev.doneAt, text: () => `control table: not applied`, tone: 'plain' });
    }
  }

  // ---- waiting ----

  private waitFor(check: () => boolean, timeoutMs: number, what: string): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    if (check()) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters.delete(waiter);
        reject(new Error(`the demo timed out waiting for ${what}`));
      }, timeoutMs);
      const waiter: Waiter = {
        check,
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
        reject: (err) => {
          clearTimeout(timer);
          reject(err);
        },
      };
      this.waiters.add(waiter);
    });
  }

  private poke(): void {
    for (const w of [...this.waiters]) {
      if (w.check()) {
        this.waiters.delete(w);
        w.resolve();
      }
    }
  }

  private fail(err: Error): void {
    if (this.failure) return;
    this.failure = err;
    for (const w of [...this.waiters]) {
      this.waiters.delete(w);
      w.reject(err);
    }
  }
}

function describeFenced(f: { applied: boolean; reason?: string }): string {
  return f.applied ? 'applied' : `refused (${f.reason})`;
}

export function rel(ms: number): string {
  return `+${(ms / 1000).toFixed(2)}s`;
}

/** The process state letter from /proc (Linux): 'T' when stopped. Polls briefly: SIGSTOP is asynchronous. */
async function procState(pid: number): Promise<string | undefined> {
  for (let i = 0; i < 20; i++) {
    try {
      const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
      const state = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
      if (state === 'T' || i === 19) return state;
    } catch {
      return undefined;
    }
    await sleep(5);
  }
  return undefined;
}
