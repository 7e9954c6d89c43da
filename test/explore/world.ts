/**
 * The world of one exploration round: a database with pgfence's schema and the fenced-writes table,
 * a TCP proxy some actors connect through, and the actors themselves (in this process or in child
 * processes of their own), each an incarnation that a close or a SIGKILL ends and a reopen replaces.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { lockKey, migrate } from '../../src/index.js';
import { ActorHost, type ActorCommand, type ActorState, WRITES_TABLE } from './actor.js';
import type { FromChild, ToChild } from './child.js';
import {
  type ExploreConfig,
  type FaultRecord,
  type HeldObservation,
  type History,
  type HoldRecord,
  now,
  type OpRecord,
  type QueueSighting,
  type Recorded,
  type WriteRecord,
} from './history.js';
import { kindNamed, type KindAdapter, type KindContext } from './kinds/index.js';
import { TcpProxy } from '../support/tcp-proxy.js';

export interface ActorPlan {
  kind: string;
  /** In a child process of its own (SIGSTOP and SIGKILL reach only those). */
  child: boolean;
  /** Connects through the fault proxy (stall and blackhole reach only those). */
  proxy: boolean;
}

export interface WorldOptions {
  /** The database the round works in (created by the caller, empty). */
  url: string;
  actors: ActorPlan[];
  keepaliveMs: number;
  leaseTtlMs: number;
  permits: Record<string, number>;
  slackMs: number;
  actEveryMs: number;
  writeEvery: number;
}

/** The parent's view of one actor slot: its current incarnation and where it runs. */
export interface Actor {
  readonly slot: number;
  readonly kind: KindAdapter;
  readonly plan: ActorPlan;
  id: string;
  appName: string;
  owner: string;
  state: ActorState;
  /** 'main', or the label of its child process. */
  process: string;
  child: ChildProcess | null;
  /** Sends to its child process (once that listens). */
  send: (msg: ToChild) => void;
  incarnation: number;
  host: ActorHost | null;
}

/** How often PostgreSQL's lock queue is looked at for the actors' waits (a shorter wait may go unseen). */
const QUEUE_POLL_MS = 25;
/** Waits for the names' keys (a bigint key: objsubid 1; markers are int4 pairs), with when each began and the server's clock now. */
const QUEUE_SQL = `
  SELECT a.application_name AS app, l.pid, ((l.classid::int8 << 32) | l.objid::int8)::text AS key, l.mode,
         (to_jsonb(l) ->> 'waitstart') AS waitstart,
         extract(epoch FROM (to_jsonb(l) ->> 'waitstart')::timestamptz) * 1000 AS wait_ms,
         extract(epoch FROM clock_timestamp()) * 1000 AS now_ms
    FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
   WHERE l.locktype = 'advisory' AND NOT l.granted AND l.objsubid = 1 AND a.application_name LIKE $1`;
/** Wall clock against the monotonic clock (both of this host) over the few ms between a wait's start and its sighting. */
const CLOCK_MARGIN_MS = 2;

const CHILD = fileURLToPath(new URL('./child.ts', import.meta.url));
const LOADER = fileURLToPath(new URL('../support/ts-loader.mjs', import.meta.url));

/** Keeps the latest version of each record (records are sent again as they complete). */
export class Recorder {
  readonly ops = new Map<string, OpRecord>();
  readonly holds = new Map<string, HoldRecord>();
  readonly writes = new Map<string, WriteRecord>();
  readonly acts: History['acts'] = [];
  readonly faults: FaultRecord[] = [];
  readonly held: HeldObservation[] = [];
  readonly processOf: Record<string, string> = {};
  readonly stopped: History['stopped'] = {};
  readonly queue: QueueSighting[] = [];

  add(r: Recorded): void {
    if (r.type === 'act') this.acts.push(r.record);
    else if (r.type === 'op') this.ops.set(r.record.id, r.record);
    else if (r.type === 'hold') this.holds.set(r.record.id, r.record);
    else this.writes.set(r.record.id, r.record);
  }

  history(config: ExploreConfig, writeLog: History['writeLog']): History {
    return {
      config,
      ops: [...this.ops.values()],
      holds: [...this.holds.values()],
      acts: this.acts,
      writes: [...this.writes.values()],
      writeLog,
      faults: this.faults,
      held: this.held,
      processOf: this.processOf,
      stopped: this.stopped,
      takenAt: now(),
      queue: this.queue,
    };
  }
}

export class World {
  readonly recorder = new Recorder();
  readonly actors: Actor[] = [];
  readonly admin: pg.Pool;
  private proxy: TcpProxy | null = null;
  private readonly tag = randomBytes(3).toString('hex');
  private readonly closedWaiters = new Map<string, ((closed: boolean) => void)[]>();
  /** application_name -> actor incarnation id. */
  private readonly actorOfApp = new Map<string, string>();
  private queueWatch: { stopped: boolean; done: Promise<void>; pool: pg.Pool } | null = null;

  constructor(readonly o: WorldOptions) {
    this.admin = new pg.Pool({ connectionString: o.url, max: 3 });
    this.admin.on('error', () => {});
  }

  get proxyServer(): TcpProxy {
    return this.proxy!;
  }

  async start(): Promise<void> {
    await migrate({ connectionString: this.o.url });
    await this.admin.query(`
      CREATE TABLE ${WRITES_TABLE} (name text PRIMARY KEY, body text, fencing_token bigint);
      CREATE TABLE ${WRITES_TABLE}_log (seq bigserial PRIMARY KEY, name text NOT NULL, token bigint NOT NULL, writer text NOT NULL);
      CREATE FUNCTION ${WRITES_TABLE}_logged() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        INSERT INTO ${WRITES_TABLE}_log (name, token, writer) VALUES (NEW.name, NEW.fencing_token, NEW.body);
        RETURN NEW;
      END $$;
      CREATE TRIGGER logged AFTER UPDATE ON ${WRITES_TABLE} FOR EACH ROW EXECUTE FUNCTION ${WRITES_TABLE}_logged();`);
    const target = new URL(this.o.url);
    this.proxy = await new TcpProxy(target.hostname, Number(target.port || 5432)).start();
    await Promise.all(this.o.actors.map((plan, slot) => this.spawn(slot, plan)));
  }

  /** The rows fenced writes go to, one per lock name. */
  async addWriteRows(names: string[]): Promise<void> {
    await this.admin.query(`INSERT INTO ${WRITES_TABLE} (name) SELECT unnest($1::text[])`, [names]);
  }

  private context(actor: Actor): KindContext {
    const url = new URL(this.o.url);
    if (actor.plan.proxy) url.port = String(this.proxy!.port);
    url.searchParams.set('application_name', actor.appName);
    return {
      url: url.toString(),
      directUrl: this.o.url,
      appName: actor.appName,
      owner: `explore:${actor.id}`,
      keepaliveMs: this.o.keepaliveMs,
      leaseTtlMs: this.o.leaseTtlMs,
      permits: this.o.permits,
    };
  }

  private async spawn(slot: number, plan: ActorPlan): Promise<void> {
    const actor: Actor = {
      slot,
      kind: kindNamed(plan.kind),
      plan,
      id: '',
      appName: '',
      owner: '',
      state: 'opening',
      process: 'main',
      child: null,
      send: () => {},
      incarnation: 0,
      host: null,
    };
    this.actors[slot] = actor;
    if (plan.child) this.startChild(actor);
    this.incarnate(actor);
  }

  private startChild(actor: Actor): void {
    const child = fork(CHILD, [], { execArgv: ['--import', LOADER], serialization: 'advanced', stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    actor.child = child;
    actor.process = `child:${actor.slot}:${child.pid}`;
    // A child that dies by itself (an uncaught exception, say) leaves its calls unsettled: say so, or that is all one sees.
    child.once('exit', (code) => {
      if (code !== null && code !== 0) console.log(`[explore] the process of ${actor.id} (${actor.process}) exited by itself with code ${code}`);
    });
    // Messages wait until the child listens (it says 'ready' once its modules are loaded).
    const early: ToChild[] = [];
    actor.send = (msg) => void early.push(msg);
    child.on('message', (msg: FromChild) => {
      if (msg.type === 'ready') {
        actor.send = (m) => void child.send(m);
        for (const m of early.splice(0)) child.send(m);
      } else if (msg.type === 'record') this.recorder.add(msg.record);
      else this.stateOf(actor, msg.id, msg.state);
    });
  }

  /** A new incarnation of the slot's actor: a new locker with a new application_name and owner. */
  incarnate(actor: Actor): void {
    actor.incarnation++;
    actor.id = `${actor.kind.kind}#${actor.slot}.${actor.incarnation}${actor.plan.child ? 'c' : ''}${actor.plan.proxy ? 'p' : ''}`;
    actor.appName = `explore_${this.tag}_${actor.slot}_${actor.incarnation}`;
    actor.owner = `explore:${actor.id}`;
    actor.state = 'opening';
    this.recorder.processOf[actor.id] = actor.process;
    this.actorOfApp.set(actor.appName, actor.id);
    const ctx = this.context(actor);
    const tuning = { slackMs: this.o.slackMs, actEveryMs: this.o.actEveryMs, writeEvery: this.o.writeEvery };
    if (actor.child) {
      actor.send({ type: 'start', kind: actor.kind.kind, id: actor.id, ctx, ...tuning });
      return;
    }
    const id = actor.id;
    actor.host = new ActorHost({
      kind: actor.kind,
      id,
      ctx,
      ...tuning,
      emit: (r) => this.recorder.add(r),
      onState: (state) => this.stateOf(actor, id, state),
    });
    void actor.host.open();
  }

  private stateOf(actor: Actor, id: string, state: ActorState): void {
    if (actor.id !== id) return;
    actor.state = state;
    if (state === 'closed') this.endWaits(id, true);
  }

  private endWaits(id: string, closed: boolean): void {
    for (const resolve of this.closedWaiters.get(id) ?? []) resolve(closed);
    this.closedWaiters.delete(id);
  }

  /** Resolves once the actor incarnation `id` is closed (its close() resolved): true; false when it was killed instead. */
  whenClosed(id: string): Promise<boolean> {
    const actor = this.actors.find((a) => a.id === id);
    if (actor?.state === 'closed') return Promise.resolve(true);
    if (!actor) return Promise.resolve(false);
    return new Promise((resolve) => this.closedWaiters.set(id, [...(this.closedWaiters.get(id) ?? []), resolve]));
  }

  command(actor: Actor, cmd: ActorCommand): void {
    // A child answers over IPC: until it does, the actor counts as busy (no check may take it for idle).
    if (cmd.op !== 'write' && cmd.op !== 'renew' && actor.state !== 'closed') actor.state = 'busy';
    if (actor.child) {
      actor.send({ type: 'command', cmd });
    } else {
      actor.host?.command(cmd);
    }
  }

  /** SIGKILL of a child actor: its calls never answer, its holds end now; the slot gets a new process and incarnation. */
  killChild(actor: Actor, at: number): void {
    actor.child?.kill('SIGKILL');
    // Killed, not closed: a check waiting for its close has nothing to check.
    this.endWaits(actor.id, false);
    for (const op of this.recorder.ops.values()) if (op.actor === actor.id && op.settledAt === undefined) op.outcome = 'killed';
    for (const hold of this.recorder.holds.values()) {
      if (hold.actor !== actor.id || hold.end !== undefined) continue;
      hold.end = 'killed';
      hold.endedAt = at;
    }
    actor.child?.removeAllListeners('message');
    this.startChild(actor);
    this.incarnate(actor);
  }

  /**
   * Records the actors' waits in PostgreSQL's lock queue for `names` (pg_locks.waitstart: when each wait
   * began on the server, put on this clock by the server's clock read in the same poll), one sighting per
   * wait, until stop(). A poll that fails (a restart) is skipped.
   */
  watchQueues(names: string[]): void {
    const nameOf = new Map(names.map((n) => [String(lockKey(n)), n]));
    const open = new Map<string, QueueSighting>();
    // A connection of its own, each look bounded: a restart or a slow server costs a missed look, never a stuck one.
    const pool = new pg.Pool({ connectionString: this.o.url, max: 1, connectionTimeoutMillis: 2000, query_timeout: 2000 });
    pool.on('error', () => {});
    const watch = { stopped: false, done: Promise.resolve(), pool };
    const poll = async () => {
      while (!watch.stopped) {
        const sentAt = now();
        let rows: { app: string; pid: number; key: string; mode: string; waitstart: string | null; wait_ms: number | null; now_ms: number }[] = [];
        try {
          rows = (await pool.query(QUEUE_SQL, [`explore\\_${this.tag}\\_%`])).rows;
        } catch {
          rows = [];
        }
        const seenAt = now();
        const seen = new Set<string>();
        for (const r of rows) {
          const name = nameOf.get(r.key);
          const actor = this.actorOfApp.get(r.app);
          if (!name || !actor || r.waitstart === null || r.wait_ms === null) continue;
          const id = `${r.pid}|${r.key}|${r.waitstart}`;
          seen.add(id);
          const sighting = open.get(id);
          if (sighting) {
            sighting.lastSentAt = sentAt;
            continue;
          }
          // The server read now_ms at some moment between sentAt and seenAt on this clock.
          const waited = Number(r.now_ms) - Number(r.wait_ms);
          const fresh: QueueSighting = {
            actor,
            name,
            mode: r.mode === 'ShareLock' ? 'shared' : 'exclusive',
            enteredFrom: sentAt - waited - CLOCK_MARGIN_MS,
            enteredBy: seenAt - waited + CLOCK_MARGIN_MS,
            firstSeenAt: seenAt,
            lastSentAt: sentAt,
          };
          open.set(id, fresh);
          this.recorder.queue.push(fresh);
        }
        for (const id of open.keys()) if (!seen.has(id)) open.delete(id);
        await new Promise((resolve) => setTimeout(resolve, QUEUE_POLL_MS));
      }
    };
    watch.done = poll();
    this.queueWatch = watch;
  }

  async stop(): Promise<void> {
    if (this.queueWatch) {
      this.queueWatch.stopped = true;
      await this.queueWatch.done;
      await this.queueWatch.pool.end().catch(() => {});
    }
    for (const actor of this.actors) actor.child?.kill('SIGKILL');
    await this.proxy?.close();
    await this.admin.end();
  }

  async writeLog(): Promise<History['writeLog']> {
    const { rows } = await this.admin.query<{ seq: string; name: string; token: string; writer: string }>(
      `SELECT seq::text, name, token::text, writer FROM ${WRITES_TABLE}_log ORDER BY seq`,
    );
    return rows.map((r) => ({ seq: Number(r.seq), name: r.name, token: BigInt(r.token), writer: r.writer }));
  }
}
