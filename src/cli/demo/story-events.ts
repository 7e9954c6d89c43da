import type pg from 'pg';
import { lockKey } from '../../keys.js';
import type { ConditionWaits } from './condition-waits.js';
import { describeFenced, staleWriteLines, type Narrator, type WakeLine } from './narration.js';
import { rel } from './output.js';
import type { WorkerEvent } from './protocol.js';
import type { DemoRecord, Holding } from './record.js';
import { leaseExpiry } from './tables.js';
import { procState, type WorkerProcess } from './worker-process.js';

export const LOCK_NAME = 'pgfence-demo:counter';

/** What the story's events need to know of the scenario. */
export interface StoryOptions {
  pause: 'stop' | 'block';
  /** The grant (1-based) whose holder is frozen. */
  victimGrant: number;
  /** Database clock minus local clock. */
  clockOffsetMs: number;
  /** The parent's own connection (inspection and final reads). */
  client: pg.Client;
  narrator: Narrator;
}

/**
 * What the workers report, as it happens: written into the record and told by the narrator. The
 * holder of the `victimGrant`-th grant is frozen the moment it has read the counter.
 */
export class StoryEvents {
  /** Workers connected so far. */
  ready = 0;
  /** The holder of the `victimGrant`-th grant, once granted. */
  victim: WorkerProcess | null = null;
  private readonly current = new Map<string, Holding>();
  /** Lines about the frozen holder after it wakes, printed in time order once it has released. */
  private wakeLines: WakeLine[] = [];

  constructor(
    private readonly record: DemoRecord,
    private readonly o: StoryOptions,
    private readonly conditions: ConditionWaits,
  ) {}

  /** Tells the lines held back since the frozen holder woke, in time order. */
  tellWakeLines(who: string): void {
    const say = this.o.narrator.say.bind(this.o.narrator);
    for (const line of this.wakeLines.sort((a, b) => a.at - b.at)) say(line.at, who, line.text(), line.tone);
    this.wakeLines = [];
  }

  /** A worker's report: recorded, narrated, and every wait looks again. */
  onEvent(worker: WorkerProcess, ev: WorkerEvent): void {
    try {
      this.handle(worker, ev);
    } catch (err) {
      this.conditions.fail(err as Error);
    }
    this.conditions.poke();
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
          void this.freeze(worker, holding, ev.fenced, ev.at).catch((err: Error) => this.conditions.fail(err));
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
        if (afterWake) this.wakeLines.push(...staleWriteLines(write.sentAt, ev));
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
    this.conditions.poke();
  }
}
