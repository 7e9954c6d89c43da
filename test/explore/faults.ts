/**
 * The faults an exploration injects, one at a time, each recorded with the actors it reaches:
 * a backend kill (pg_terminate_backend, waiting for the exit), a stall or blackhole of the proxy,
 * SIGSTOP (then SIGCONT) or SIGKILL of a child holder, and a restart of the round's private cluster.
 */
import type { PrivateCluster } from '../support/cluster.js';
import { killBackends, sleep } from '../support/db.js';
import type { FaultRecord, FaultType } from './history.js';
import { now } from './history.js';
import type { Actor, World } from './world.js';

export const FAULT_TYPES: readonly FaultType[] = ['backend-kill', 'stall', 'blackhole', 'sigstop', 'sigkill', 'restart'];

export interface FaultRequest {
  type: FaultType;
  /** Picks the target among the candidates (a fraction in [0, 1)). */
  pick: number;
  durationMs: number;
}

export class Faults {
  private active: Promise<void> | null = null;
  /** A fault that could not be injected (a restart that failed): the round fails with it at settle(). */
  private failure: unknown = null;
  private lastEndedAt = -Infinity;
  private counter = 0;

  constructor(
    private readonly world: World,
    private readonly cluster: PrivateCluster | null,
    /** The quiet time between two faults. */
    private readonly gapMs: number,
  ) {}

  get busy(): boolean {
    return this.active !== null;
  }

  /** The moment the last fault ended (for checks that need the database settled). */
  get quietSince(): number {
    return this.active ? Infinity : this.lastEndedAt;
  }

  /** Which fault types this world can inject. */
  available(): FaultType[] {
    const actors = this.world.actors;
    return FAULT_TYPES.filter((t) => {
      if (t === 'restart') return this.cluster !== null;
      if (t === 'sigstop' || t === 'sigkill') return actors.some((a) => a.child);
      if (t === 'stall' || t === 'blackhole') return actors.some((a) => a.plan.proxy);
      return true;
    });
  }

  /** Starts the fault unless one is going on (or ended too recently); it ends by itself. */
  inject(req: FaultRequest): boolean {
    if (this.active || now() - this.lastEndedAt < this.gapMs) return false;
    const run = this.run(req);
    if (!run) return false;
    this.active = run
      .catch((err: unknown) => void (this.failure ??= err))
      .finally(() => {
        this.active = null;
        this.lastEndedAt = now();
      });
    return true;
  }

  /** Waits for the fault going on, if any, to end. */
  async settle(): Promise<void> {
    while (this.active) await this.active;
    if (this.failure) throw this.failure;
  }

  private record(type: FaultType, targets: Actor[]): FaultRecord {
    const fault: FaultRecord = { id: `fault${++this.counter}:${type}`, type, targets: targets.map((a) => a.id), at: now() };
    this.world.recorder.faults.push(fault);
    return fault;
  }

  private run(req: FaultRequest): Promise<void> | null {
    const all = this.world.actors;
    const pick = <T>(list: T[]): T | undefined => list[Math.floor(req.pick * list.length)];
    switch (req.type) {
      case 'backend-kill': {
        const actor = pick(all.filter((a) => a.state !== 'closed' && a.state !== 'opening'));
        if (!actor) return null;
        const fault = this.record('backend-kill', [actor]);
        return killBackends(this.world.o.url, actor.appName, 5000).then(
          () => void (fault.doneAt = fault.endedAt = now()),
          () => void (fault.endedAt = now()),
        );
      }
      case 'stall':
      case 'blackhole': {
        const targets = all.filter((a) => a.plan.proxy);
        if (targets.length === 0) return null;
        const proxy = this.world.proxyServer;
        const fault = this.record(req.type, targets);
        if (req.type === 'stall') proxy.stall();
        else proxy.blackhole();
        return sleep(req.durationMs).then(() => {
          proxy.heal();
          // Bytes a blackhole swallowed leave every stream through it broken: end them all.
          if (req.type === 'blackhole') proxy.cutAll();
          fault.endedAt = now();
        });
      }
      case 'sigstop': {
        const actor = pick(all.filter((a) => a.child && a.state !== 'opening'));
        if (!actor) return null;
        const child = actor.child!;
        const fault = this.record('sigstop', [actor]);
        child.kill('SIGSTOP');
        return sleep(req.durationMs).then(() => {
          child.kill('SIGCONT');
          fault.endedAt = now();
          (this.world.recorder.stopped[actor.process] ??= []).push({ from: fault.at, to: fault.endedAt });
        });
      }
      case 'sigkill': {
        const actor = pick(all.filter((a) => a.child && a.state !== 'opening'));
        if (!actor) return null;
        const fault = this.record('sigkill', [actor]);
        this.world.killChild(actor, fault.at);
        fault.endedAt = fault.doneAt = now();
        return Promise.resolve();
      }
      case 'restart': {
        if (!this.cluster) return null;
        const fault = this.record('restart', all);
        return this.cluster.restart(req.pick < 0.5 ? 'fast' : 'immediate').then(
          () => void (fault.endedAt = fault.doneAt = now()),
          (err: unknown) => {
            fault.endedAt = now();
            throw err;
          },
        );
      }
    }
  }
}
