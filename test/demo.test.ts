import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DemoRecord, Holding, WriteRecord } from '../src/cli/demo/record.js';
import { summarize, type Summary } from '../src/cli/demo/summary.js';
import { timelineSvg } from '../src/cli/demo/timeline-svg.js';
import { findChromium, layoutProblems, layoutSvgs } from './support/chromium.js';
import { useTestDatabase } from './support/db.js';

const chromium = findChromium();
if (!chromium) {
  const where = process.env.CI ? 'on CI, where it must be installed (.ci/run installs it)' : 'so the layout tests are SKIPPED';
  console.warn(`\n*** No Chromium found (set CHROMIUM=/path/to/chromium) ${where}: the demo's SVG layout is not checked. ***\n`);
}

// The built command (the global setup builds dist/ first), as a user runs it.
const main = fileURLToPath(new URL('../dist/cli/main.js', import.meta.url));

function pgfence(args: string[], timeoutMs = 90_000): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const env: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: '1' };
    // The demo must use --database-url, or embedded PostgreSQL when there is none.
    for (const name of ['DATABASE_URL', 'PGHOST', 'PGPORT', 'PGUSER', 'PGDATABASE', 'PGPASSWORD']) delete env[name];
    const child = spawn(process.execPath, [main, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (s: string) => (stdout += s));
    child.stderr.setEncoding('utf8').on('data', (s: string) => (stderr += s));
    const timer = setTimeout(() => {
      child.kill('SIGINT');
      reject(new Error(`pgfence ${args.join(' ')} did not finish in ${timeoutMs} ms\n${stdout}\n${stderr}`));
    }, timeoutMs);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** A number captured by `re` from `text` (fails the test, showing the text, when absent). */
function num(text: string, re: RegExp, group = 1): number {
  const m = re.exec(text);
  expect(m, `${re} in:\n${text}`).not.toBeNull();
  return Number(m![group]);
}

/** Elements open and close in order (self-closing ones aside); text outside tags never holds a raw '<'. */
function checkBalancedXml(xml: string): string[] {
  const errors: string[] = [];
  const stack: string[] = [];
  const tag = /<(\/?)([A-Za-z][\w:-]*)((?:\s+[\w:-]+="[^"]*")*)\s*(\/?)>/g;
  let last = 0;
  for (let m = tag.exec(xml); m; m = tag.exec(xml)) {
    const between = xml.slice(last, m.index);
    if (between.includes('<') || between.includes('>')) errors.push(`stray markup near ${JSON.stringify(between.slice(0, 60))}`);
    last = tag.lastIndex;
    const [, closing, name, , selfClosing] = m;
    if (selfClosing) continue;
    if (!closing) stack.push(name!);
    else if (stack.pop() !== name) errors.push(`</${name}> closes the wrong element`);
  }
  if (xml.slice(last).trim() !== '') errors.push('text after the root element');
  if (stack.length) errors.push(`unclosed: ${stack.join(', ')}`);
  return errors;
}

describe('pgfence demo', () => {
  let db: Awaited<ReturnType<typeof useTestDatabase>>;
  let dir: string;
  let run: { code: number | null; stdout: string; stderr: string };
  let svgPath: string;

  beforeAll(async () => {
    db = await useTestDatabase('demo');
    dir = await mkdtemp(join(tmpdir(), 'pgfence-demo-test-'));
    svgPath = join(dir, 'timeline.svg');
    run = await pgfence(['demo', '--database-url', db.url, '--out', svgPath]);
  }, 120_000);

  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** The narrative with its wrapped lines joined back (continuations are indented by 15 spaces). */
  const story = () => run.stdout.replace(/\n {15}(?=\S)/g, ' ');

  it('exits 0 and tells the story as it happens', () => {
    const out = story();
    expect(run.code, `${out}\n${run.stderr}`).toBe(0);
    expect(out).toMatch(/FROZEN: the demo freezes it with SIGSTOP/);
    expect(out).toMatch(/lease granted, token \d+\. The database let W\d in because W\d's lease ran out/);
    // The refused stale write and the silent overwrite.
    expect(out).toMatch(/fenced table: REFUSED\. fencedUpdate found token \d+ in the row/);
    expect(out).toMatch(/control table: APPLIED\. The plain UPDATE silently replaced \d+/);
    // Timestamps relative to the start, in order.
    const stamps = [...out.matchAll(/^ *\+(\d+\.\d\d)s {2}/gm)].map((m) => Number(m[1]));
    expect(stamps.length).toBeGreaterThan(10);
    expect(stamps).toEqual([...stamps].sort((a, b) => a - b));
    // 80 columns (a line holding a path or a URL may not be breakable).
    const wide = run.stdout.split('\n').filter((l) => l.length > 80 && !l.includes('/'));
    expect(wide).toEqual([]);
    expect(out).not.toMatch(/\x1b\[/); // NO_COLOR, and not a terminal
  });

  it('summarises what the database holds afterwards', async () => {
    const out = story();
    expect(run.code, `${out}\n${run.stderr}`).toBe(0);
    const frozen = /frozen holder +(W\d) with token (\d+)/.exec(out);
    expect(frozen, out).not.toBeNull();
    const [, frozenWorker, frozenToken] = frozen!;
    const staleValue = num(out, new RegExp(`\\+\\d+\\.\\d+s {2}${frozenWorker} +finishes the work it was frozen in\\. It had checked lease\\.signal\\.aborted just before that work: false\\.[^]*?It writes counter = (\\d+) to both tables`));
    const grants = [...out.matchAll(/(W\d) +lease granted, token (\d+)/g)].map((m) => ({ worker: m[1]!, token: BigInt(m[2]!) }));
    const newest = grants.reduce((a, b) => (b.token > a.token ? b : a));

    const ackFenced = num(out, /increments acknowledged +(\d+) +(\d+)/, 1);
    const ackControl = num(out, /increments acknowledged +(\d+) +(\d+)/, 2);
    const finalFenced = num(out, /final counter in PostgreSQL +(\d+) +(\d+)/, 1);
    const finalControl = num(out, /final counter in PostgreSQL +(\d+) +(\d+)/, 2);
    const lostFenced = num(out, /lost updates +(\d+) +(\d+)/, 1);
    const lostControl = num(out, /lost updates +(\d+) +(\d+)/, 2);
    expect(num(out, /lease grants +(\d+)/)).toBe(grants.length);
    expect(num(out, /stale writes \(lease already gone\) +(\d+) refused +(\d+) applied/, 1)).toBe(1);
    expect(num(out, /stale writes \(lease already gone\) +(\d+) refused +(\d+) applied/, 2)).toBe(1);

    // The headline.
    expect(num(out, /fenced table: (\d+) lost updates? \((\d+) stale writes? refused/, 1)).toBe(0);
    expect(num(out, /fenced table: (\d+) lost updates? \((\d+) stale writes? refused/, 2)).toBe(1);
    expect(num(out, /unfenced control table: (\d+) lost updates?/)).toBe(lostControl);
    expect(lostFenced).toBe(0);
    expect(lostControl).toBeGreaterThan(0);

    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      const row = async (table: string) =>
        (
          await client.query<{ value: number; last_writer: string; writer_token: string }>(
            `SELECT value, last_writer, writer_token::text FROM pgfence_demo.${table} WHERE id = 'counter'`,
          )
        ).rows[0]!;
      const fenced = await row('fenced_counter');
      const control = await row('control_counter');
      const { rows } = await client.query<{ t: string }>(`SELECT fencing_token::text AS t FROM pgfence_demo.fenced_counter`);

      // The fenced record holds the newest holder's value: every acknowledged increment is there.
      expect(fenced.value).toBe(finalFenced);
      expect(fenced.value).toBe(ackFenced);
      expect(fenced.last_writer).toBe(newest.worker);
      expect(fenced.last_writer).not.toBe(frozenWorker);
      expect(BigInt(fenced.writer_token)).toBe(newest.token);
      expect(BigInt(rows[0]!.t)).toBe(newest.token);

      // The control record holds the paused holder's stale value: the newer increments are gone.
      expect(control.value).toBe(finalControl);
      expect(control.value).toBe(staleValue);
      expect(control.last_writer).toBe(frozenWorker);
      expect(control.writer_token).toBe(frozenToken);
      expect(ackControl - control.value).toBe(lostControl);
      expect(ackControl).toBe(ackFenced + 1); // the stale write, acknowledged by the control table only
    // ... and the summary says so, or 12 against 13 reads as a write the fenced table dropped.
    expect(out.replace(/\s+/g, ' ')).toMatch(/\(The control table acknowledged 1 increment more: the stale write, which the fenced table refused\.\)/);
    // Tokens skip numbers when workers race for a free lease: the summary explains the gap when there is one.
    const tokens = grants.map((g) => g.token);
    const span = Number(tokens.reduce((a, b) => (b > a ? b : a)) - tokens.reduce((a, b) => (b < a ? b : a))) + 1;
    const explained = /numbers for \d+ grants: a worker that raced for a free lease and lost drew a token too/.test(out.replace(/\s+/g, ' '));
    expect(explained, out).toBe(span > grants.length);
      expect(fenced.value - control.value + 1).toBe(lostControl);

      // migrate() ran in that database, and the demo kept to its own schema.
      const schemas = await client.query<{ nspname: string }>(
        `SELECT nspname FROM pg_namespace WHERE nspname IN ('pgfence', 'pgfence_demo') ORDER BY 1`,
      );
      expect(schemas.rows.map((r) => r.nspname)).toEqual(['pgfence', 'pgfence_demo']);
    } finally {
      await client.end();
    }
  });

  it('draws the timeline as a standalone SVG', async () => {
    expect(run.code, `${run.stdout}\n${run.stderr}`).toBe(0);
    expect(run.stdout).toContain(`Timeline: ${svgPath}`);
    expect((await stat(svgPath)).size).toBeGreaterThan(1000);
    const svg = (await readFile(svgPath, 'utf8')).trim();
    expect(svg.startsWith('<svg xmlns="http://www.w3.org/2000/svg"')).toBe(true);
    expect(svg.endsWith('</svg>')).toBe(true);
    expect(checkBalancedXml(svg)).toEqual([]);
    expect(svg).not.toMatch(/NaN|undefined|Infinity/);

    // A lane per worker, a labelled bar per grant, both markers, a time axis.
    for (const w of ['W1', 'W2', 'W3']) {
      expect(svg).toContain(`id="lane-${w}"`);
      expect(svg).toContain(`>${w}</text>`);
    }
    const grants = [...story().matchAll(/(W\d) +lease granted, token (\d+)/g)];
    const bars = [...svg.matchAll(/<g class="holding" data-worker="(W\d)" data-token="(\d+)">/g)].map((m) => `${m[1]}:${m[2]}`);
    expect(bars.sort()).toEqual(grants.map((m) => `${m[1]}:${m[2]}`).sort());
    for (const m of grants) expect(svg).toContain(`>token ${m[2]}</text>`);
    expect(svg).toMatch(/<g class="marker refused">[^]*fenced write refused: token \d+ is stale/);
    expect(svg).toMatch(/<g class="marker overwrite">[^]*control write silently overwrote \d+ -&gt; \d+/);
    // The frozen stretch: its length, and the SIGSTOP and SIGCONT that began and ended it.
    expect(svg).toMatch(/>frozen \d+\.\d s<\/text>/);
    expect(svg).toMatch(/>SIGSTOP<\/text>[^]*>SIGCONT<\/text>/);
    expect([...svg.matchAll(/>\+\d+(\.\d)?s<\/text>/g)].length).toBeGreaterThanOrEqual(3);
  });

  it.skipIf(!chromium && !process.env.CI)('lays the timeline out cleanly in Chromium: no label crossed, every tick inside its bar', async () => {
    expect(chromium, 'Chromium is needed for this test on CI').not.toBeNull();
    expect(run.code, `${run.stdout}\n${run.stderr}`).toBe(0);
    const [layout] = await layoutSvgs(chromium!, [await readFile(svgPath, 'utf8')]);
    expect(layout!.ticks.length).toBeGreaterThanOrEqual(8);
    expect(layoutProblems(layout!)).toEqual([]);
  });
});

describe('pgfence demo without a database', () => {
  it('starts embedded PostgreSQL, and stops it (saying so) before the summary', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'pgfence-demo-embedded-test-'));
    try {
      const r = await pgfence(['demo', '--out', join(dir, 't.svg')]);
      expect(r.code, `${r.stdout}\n${r.stderr}`).toBe(0);
      const dataDir = /data in\s+(\S+)/.exec(r.stdout)?.[1];
      expect(dataDir, r.stdout).toBeDefined();
      const stopped = r.stdout.indexOf('PostgreSQL stopped, its temporary directory removed.');
      expect(stopped, r.stdout).toBeGreaterThan(0);
      expect(stopped, r.stdout).toBeLessThan(r.stdout.indexOf('\nSummary\n'));
      expect(r.stdout.trimEnd().split('\n').at(-1)).toMatch(/^Timeline: /);
      await expect(stat(dataDir!)).rejects.toMatchObject({ code: 'ENOENT' });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, 120_000);
});

describe('pgfence demo --help and bad options', () => {
  it('explains its options', async () => {
    const r = await pgfence(['demo', '--help'], 20_000);
    expect(r.code).toBe(0);
    for (const flag of ['--database-url', '--out', '--workers', '--pause', '--quiet']) expect(r.stdout).toContain(flag);
    expect(r.stdout.split('\n').filter((l) => l.length > 80)).toEqual([]);
  });

  it('refuses a bad option with exit 64, before touching anything', async () => {
    const r = await pgfence(['demo', '--workers', '1'], 20_000);
    expect(r.code).toBe(64);
    expect(r.stderr).toMatch(/--workers/);
  });
});

// ---- The timeline's layout, measured in a real browser ----

/**
 * A run as the demo records it (times in ms since t0): W3 is frozen holding token 4, its lease
 * expires at 3580 and W1 takes over at that very moment; each holder's second increment is sent as
 * it releases (its tick would sit on the bar's edge). `idle` adds workers that never got the lease.
 */
function syntheticRun(idle: string[] = []): { record: DemoRecord; summary: Summary } {
  const workers = ['W1', 'W2', 'W3', ...idle];
  const write = (worker: string, token: bigint, sentAt: number, wanted: number, stale = false): WriteRecord => ({
    worker,
    token,
    sentAt,
    doneAt: sentAt + 2,
    stale,
    fenced: stale ? { applied: false, reason: 'stale', currentToken: '9', wanted, valueNow: 10 } : { applied: true, wanted },
    control: stale ? { applied: true, wanted, overwrote: 10, overwroteToken: '9' } : { applied: true, wanted },
  });
  const holding = (worker: string, token: bigint, index: number, from: number, to: number, first: number): Holding => ({
    worker,
    token,
    index,
    grantedAt: from,
    expiresAt: from + 2000,
    releasedAt: to,
    released: true,
    writes: [write(worker, token, from + (to - from) / 2, first), write(worker, token, to, first + 1)],
  });
  const victim: Holding = { worker: 'W3', token: 4n, index: 3, grantedAt: 1590, expiresAt: 3590, releasedAt: 5300, released: false, writes: [] };
  const stale = write('W3', 4n, 5292, 5, true);
  victim.writes.push(stale);
  const holdings = [
    holding('W2', 1n, 1, 520, 1050, 1),
    holding('W1', 2n, 2, 1060, 1580, 3),
    victim,
    holding('W1', 6n, 4, 3580, 4090, 5),
    holding('W2', 8n, 5, 4090, 4600, 7),
    holding('W1', 9n, 6, 4610, 5110, 9),
  ];
  const record: DemoRecord = {
    t0: 0,
    workers,
    ttlMs: 2000,
    holdings,
    writes: holdings.flatMap((h) => h.writes).sort((a, b) => a.sentAt - b.sentAt),
    pause: { worker: 'W3', token: 4n, how: 'stop', readValue: 4, pausedAt: 1592, procState: 'T', dbExpiresAt: 3580, resumedAt: 5290 },
    takeover: { worker: 'W1', token: 6n, at: 3580 },
    final: { fenced: { value: 10, lastWriter: 'W1', writerToken: 9n, fencingToken: 9n }, control: { value: 5, lastWriter: 'W3', writerToken: 4n } },
    endAt: 5400,
  };
  return { record, summary: summarize(record) };
}

describe.skipIf(!chromium && !process.env.CI)("the demo timeline's layout in Chromium", () => {
  it('is laid out without a label crossed by a line or another label, and with every tick inside its bar', async () => {
    expect(chromium, 'Chromium is needed for this test on CI').not.toBeNull();
    const plain = syntheticRun();
    const withIdle = syntheticRun(['W4']);
    const layouts = await layoutSvgs(chromium!, [timelineSvg(plain.record, plain.summary), timelineSvg(withIdle.record, withIdle.summary)]);
    for (const layout of layouts) {
      expect(layout.labels.length).toBeGreaterThan(20);
      expect(layout.ticks.length).toBe(10); // two per completed holding
      expect(layout.lines.filter((l) => l.cls === 'expiry-line').length).toBeGreaterThan(0);
      expect(layoutProblems(layout)).toEqual([]);
    }
  });

  it('explains an empty lane, marks SIGSTOP and SIGCONT, and draws the legend with the chart\'s own symbols', async () => {
    const { record, summary } = syntheticRun(['W4']);
    const svg = timelineSvg(record, summary);
    const [layout] = await layoutSvgs(chromium!, [svg]);
    const texts = layout!.labels.map((l) => l.text);
    expect(texts.some((t) => /W4 never got the lease/.test(t)), texts.join(' | ')).toBe(true);
    expect(texts.filter((t) => /never got the lease/.test(t))).toHaveLength(1); // only the idle worker's lane
    expect(texts).toContain('SIGSTOP');
    expect(texts).toContain('SIGCONT');
    for (const cls of ['symbol refused', 'symbol overwrite']) {
      const chart = layout!.symbols.filter((s) => s.cls === cls && !s.inLegend);
      const legend = layout!.symbols.filter((s) => s.cls === cls && s.inLegend);
      expect(chart.length, cls).toBe(1);
      expect(legend.length, cls).toBe(1);
      expect(legend[0]!.shapes, cls).toEqual(chart[0]!.shapes);
    }
  });
});
