/**
 * The random operations and faults of an exploration, as fast-check commands: fc.commands draws
 * them from the round's seed, fc.asyncModelRun runs them in order. A command only starts things (an
 * acquire, a fault) and returns; what happens then is recorded in the history. Each step reads the
 * actor's state as it runs, so the same seed always draws the same commands, while their effect
 * follows what the real lockers did.
 */
import fc from 'fast-check';
import { sleep } from '../support/db.js';
import type { ActorCommand } from './actor.js';
import { type FaultRequest, FAULT_TYPES, type Faults } from './faults.js';
import type { Mode } from './history.js';
import { now } from './history.js';
import { checkAfterClose, checkIdle } from './inspect.js';
import { MAX_WAIT_MS } from './kinds/kind.js';
import type { Actor, World } from './world.js';

export interface Model {
  /** The round stops drawing effects at this moment (commands left over are skipped). */
  deadline: number;
}

export interface Explorer {
  world: World;
  faults: Faults;
  names: string[];
  semaphores: string[];
  /** After a close, how long to watch for what it left (the checker judges). */
  closeWatchMs: number;
  /** An idle actor is inspected only this long after the last fault ended (the server settles first). */
  inspectQuietMs: number;
  /** Checks in flight (after-close), awaited before the round ends. */
  pending: Set<Promise<unknown>>;
  /** A check in flight that could not look (the database unreachable even after the faults ended): the round fails with it. */
  checkFailure?: unknown;
  counts: Record<string, number>;
}

type Cmd = fc.AsyncCommand<Model, Explorer>;

const TIMEOUTS_MS = [0, 50, 250, 1000, MAX_WAIT_MS];

const count = (x: Explorer, what: string) => void (x.counts[what] = (x.counts[what] ?? 0) + 1);

/** One step of one actor, chosen by its state when it runs. */
class Step implements Cmd {
  constructor(
    readonly slot: number,
    readonly roll: number,
    readonly pickName: number,
    readonly timeoutMs: number,
    readonly shared: boolean,
    readonly abortAfterMs: number | null,
  ) {}

  check(m: Readonly<Model>): boolean {
    return now() < m.deadline;
  }

  async run(_m: Model, x: Explorer): Promise<void> {
    const actor = x.world.actors[this.slot % x.world.actors.length]!;
    const r = this.roll;
    const send = (cmd: ActorCommand) => {
      count(x, `${actor.kind.kind}:${cmd.op}`);
      x.world.command(actor, cmd);
    };
    switch (actor.state) {
      case 'opening':
        return;
      case 'closed':
        // Now and then a call on the closed locker (it must refuse, typed); else a new incarnation.
        if (r < 0.1) return send(this.acquire(actor, x));
        return x.world.incarnate(actor);
      case 'idle':
        if (r < 0.5) return send(this.acquire(actor, x));
        if (r < 0.8) return send(actor.kind.supports.try ? { op: 'try', name: this.name(actor, x), mode: this.mode(actor) } : this.acquire(actor, x));
        if (r < 0.83) return this.close(actor, x);
        return;
      case 'holding':
        if (r < 0.5) return send({ op: 'release' });
        if (r < 0.6) return send({ op: 'write' });
        if (r < 0.7 && actor.kind.supports.renew) return send({ op: 'renew' });
        if (r < 0.73) return this.close(actor, x);
        return;
      case 'lost':
        return send({ op: 'release' });
      case 'busy':
        if (r < 0.02) return this.close(actor, x);
        return;
    }
  }

  private name(actor: Actor, x: Explorer): string {
    const names = actor.kind.family === 'permit' ? x.semaphores : x.names;
    return names[Math.floor(this.pickName * names.length)]!;
  }

  private mode(actor: Actor): Mode {
    return this.shared && actor.kind.modes.includes('shared') ? 'shared' : 'exclusive';
  }

  private acquire(actor: Actor, x: Explorer): ActorCommand {
    const abortAfterMs = actor.kind.supports.abort && this.abortAfterMs !== null ? this.abortAfterMs : undefined;
    return { op: 'acquire', name: this.name(actor, x), mode: this.mode(actor), timeoutMs: this.timeoutMs, abortAfterMs };
  }

  private close(actor: Actor, x: Explorer): void {
    count(x, `${actor.kind.kind}:close`);
    const who = { id: actor.id, kind: actor.kind.kind, appName: actor.appName, owner: actor.owner };
    x.world.command(actor, { op: 'close' });
    const check = x.world
      .whenClosed(who.id)
      .then(async (closed) => {
        if (!closed) return;
        // Through a fault, the server cannot know yet: look once the fault is over.
        if (x.faults.busy) await x.faults.settle().catch(() => {});
        let clean: boolean;
        try {
          clean = await checkAfterClose(x.world, who, x.closeWatchMs);
        } catch {
          // A restart that began while it looked broke the admin's connection: look again once it is over
          // (the restart ended every backend, so the second look can only confirm that nothing is left).
          await x.faults.settle().catch(() => {});
          clean = await checkAfterClose(x.world, who, x.closeWatchMs);
        }
        if (!clean) count(x, 'left-after-close');
      })
      .catch((err: unknown) => void (x.checkFailure ??= err))
      .finally(() => x.pending.delete(check));
    x.pending.add(check);
  }

  toString(): string {
    return `step(${this.slot}, ${this.roll.toFixed(2)}, ${this.pickName.toFixed(2)}, ${this.timeoutMs}${this.shared ? ', shared' : ''}${this.abortAfterMs === null ? '' : `, abort ${this.abortAfterMs}`})`;
  }
}

class Pause implements Cmd {
  constructor(readonly ms: number) {}
  check(m: Readonly<Model>): boolean {
    return now() < m.deadline;
  }
  async run(): Promise<void> {
    await sleep(this.ms);
  }
  toString(): string {
    return `pause(${this.ms})`;
  }
}

class Fault implements Cmd {
  constructor(readonly req: FaultRequest) {}
  check(m: Readonly<Model>): boolean {
    return now() < m.deadline;
  }
  async run(_m: Model, x: Explorer): Promise<void> {
    if (!x.faults.available().includes(this.req.type)) return;
    if (x.faults.inject(this.req)) count(x, `fault:${this.req.type}`);
  }
  toString(): string {
    return `fault(${this.req.type}, ${this.req.pick.toFixed(2)}, ${this.req.durationMs})`;
  }
}

/** An idle actor (nothing held, nothing in flight) holds nothing on the server. */
class Inspect implements Cmd {
  constructor(readonly slot: number) {}
  check(m: Readonly<Model>): boolean {
    return now() < m.deadline;
  }
  async run(_m: Model, x: Explorer): Promise<void> {
    const actor = x.world.actors[this.slot % x.world.actors.length]!;
    if (actor.state !== 'idle' || now() - x.faults.quietSince < x.inspectQuietMs) return;
    count(x, 'inspect');
    if (!(await checkIdle(x.world, actor))) count(x, 'held-while-idle');
  }
  toString(): string {
    return `inspect(${this.slot})`;
  }
}

/** The commands of one batch (up to maxCommands), drawn from fc's generator seeded by the round. */
export function commandsArbitrary(actors: number, maxCommands: number): fc.Arbitrary<Iterable<Cmd>> {
  // Without bias: fast-check leans towards edge values (0, the bounds) by default, which here would
  // mean the same actor, the same roll and the same timeout over and over.
  const slot = fc.noBias(fc.nat({ max: actors - 1 }));
  const unit = fc.noBias(fc.integer({ min: 0, max: 9999 })).map((n) => n / 10_000);
  const step = fc
    .tuple(slot, unit, unit, fc.constantFrom(...TIMEOUTS_MS), fc.boolean(), fc.oneof({ arbitrary: fc.constant(null), weight: 5 }, { arbitrary: fc.noBias(fc.integer({ min: 0, max: 300 })), weight: 1 }))
    .map(([s, roll, pickName, timeoutMs, shared, abortAfterMs]) => new Step(s, roll, pickName, timeoutMs, shared, abortAfterMs));
  const pause = fc.noBias(fc.integer({ min: 5, max: 150 })).map((ms) => new Pause(ms));
  const fault = fc
    .record({ type: fc.constantFrom(...FAULT_TYPES), pick: unit, durationMs: fc.noBias(fc.integer({ min: 200, max: 4000 })) })
    .map((req) => new Fault(req));
  const inspect = slot.map((s) => new Inspect(s));
  const command: fc.Arbitrary<Cmd> = fc.oneof(
    { arbitrary: step, weight: 60 },
    { arbitrary: pause, weight: 15 },
    { arbitrary: fault, weight: 4 },
    { arbitrary: inspect, weight: 10 },
  );
  return fc.commands([command], { maxCommands, size: 'max' });
}
