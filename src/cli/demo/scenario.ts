import { writeFile } from 'node:fs/promises';
import { TIMED_OUT, within } from '../../core/index.js';
import { ConditionWaits } from './condition-waits.js';
import type { WorkerConfig } from './protocol.js';
import type { DemoRecord } from './record.js';
import { LOCK_NAME, StoryEvents, type StoryOptions } from './story-events.js';
import { CONTROL_TABLE, FENCED_TABLE, readCounters, ROW_ID } from './tables.js';
import { startWorker, type WorkerProcess } from './worker-process.js';

interface ScenarioOptions extends StoryOptions {
  url: string;
  workers: number;
  ttlMs: number;
  workMs: number;
  jobsPerHold: number;
  /** Holdings completed by the others after the takeover, before the frozen one is resumed. */
  holdsAfterTakeover: number;
  /** Where --pause block's wake file goes. */
  wakeFile: string;
  /** Aborted on Ctrl-C. */
  signal: AbortSignal;
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
  private readonly conditions = new ConditionWaits();
  private readonly events: StoryEvents;
  private quitting = false;

  constructor(
    private readonly o: ScenarioOptions,
    t0: number,
  ) {
    this.record = { t0, workers: [], ttlMs: o.ttlMs, holdings: [], writes: [] };
    this.events = new StoryEvents(this.record, o, this.conditions);
    o.signal.addEventListener('abort', () => this.conditions.fail(new Error('interrupted')), { once: true });
  }

  async run(): Promise<void> {
    const o = this.o;
    const say = o.narrator.say.bind(o.narrator);
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
      const worker = startWorker(config, (w, event) => this.events.onEvent(w, event));
      const child = worker.child;
      this.workers.push(worker);
      this.record.workers.push(name);
      child.once('exit', (code, sig) => {
        if (!this.quitting) {
          const tail = worker.stderr.length ? `\n${worker.stderr.join('\n')}` : '';
          this.conditions.fail(new Error(`worker ${name} exited unexpectedly (${sig ?? `code ${code}`})${tail}`));
        }
        this.conditions.poke();
      });
      child.once('error', (err) => this.conditions.fail(new Error(`worker ${name} could not start: ${err.message}`)));
    }

    await this.conditions.waitFor(() => this.events.ready === o.workers, 30_000, 'the workers to connect');
    say(Date.now(), 'demo', `${o.workers} worker processes are connected (${this.workers.map((w) => `${w.name}: pid ${w.child.pid}`).join(', ')}). Go!`);
    for (const w of this.workers) w.send('go');

    await this.conditions.waitFor(() => this.record.pause?.dbExpiresAt !== undefined, 60_000, 'a holder to freeze');
    await this.conditions.waitFor(() => this.record.takeover !== undefined, o.ttlMs + 30_000, 'another worker to take the lease over');
    const takeover = this.record.takeover!;
    await this.conditions.waitFor(
      () => this.record.holdings.filter((h) => h.token >= takeover.token && h.releasedAt !== undefined).length >= o.holdsAfterTakeover,
      60_000,
      'the others to work on',
    );

    const victim = this.events.victim!;
    const others = this.workers.filter((w) => w !== victim);
    for (const w of others) w.send('stop');
    await this.conditions.waitFor(() => others.every((w) => w.stopped), 30_000, 'the other workers to stop');
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
    await this.conditions.waitFor(() => victimHolding.releasedAt !== undefined, 30_000, `${victim.name} to finish`);
    this.events.tellWakeLines(victim.name);
    victim.send('stop');
    await this.conditions.waitFor(() => victim.stopped, 30_000, `${victim.name} to stop`);
    this.record.final = await readCounters(o.client);
    this.record.endAt = Date.now();
  }

  /** Ends every worker process (also the frozen one, also after a failure). */
  async shutdown(): Promise<void> {
    this.quitting = true;
    for (const w of this.workers) {
      if (w.exited) continue;
      // Still frozen (stopped, or blocked until a wake file that will not come): nothing to wait for.
      if (w === this.events.victim && this.record.pause && this.record.pause.resumedAt === undefined) w.child.kill('SIGKILL');
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
}
