// Checks the Promela models of models/ with spin (docs/ARCHITECTURE.md, "Models"): each model as it
// is must pass, and each of its deliberately broken variants (spin -DBROKEN=n) must yield a
// counter-example that violates the property the variant breaks.
//   node scripts/spin-models.mjs [--json] [--only tokens,leases] [--jobs N] [--keep]
// Each check runs in a temporary directory: spin -a, gcc (safety checks only: -DSAFETY), ./pan. The
// table gives spin's own figures (errors, states stored, depth reached) and the time pan took (wall and
// CPU). --keep keeps the directories and prints, for each counter-example, the spin -t command that
// replays it step by step.
// Exit status: 0 when every check went as expected, 1 when one did not, 2 when spin or gcc is missing.
// Needs spin and gcc (Debian packages `spin` and `gcc`); no npm dependency.
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));

/** Every pan refuses to grow past this (MB): a model grown too large fails instead of exhausting memory. */
const MEMLIM_MB = 2048;
/** pan's search depth bound: a search that reaches it is incomplete, and fails. */
const MAX_DEPTH = 20000;
/** One check (spin, gcc or pan) is stopped after this. */
const STEP_TIMEOUT_MS = 180_000;

/**
 * The models, each with its pan options and its broken variants. `edit` says what the variant changes
 * (the model's header says it in full); `breaks` matches the assertion its counter-example must violate.
 */
export const MODELS = [
  {
    model: 'tokens',
    file: 'models/tokens.pml',
    cflags: ['-DSAFETY', '-DCOLLAPSE'],
    panArgs: ['-w23'],
    variants: [
      { broken: 1, edit: 'a per-key counter that a rollback undoes, not the sequence', breaks: /handed_out|row_gen/ },
      { broken: 2, edit: 'no floor on promotion', breaks: /handed_out|row_gen/ },
      { broken: 3, edit: 'the floor mover does not draw again under its lock', breaks: /handed_out/ },
    ],
  },
  {
    model: 'leases',
    file: 'models/leases.pml',
    cflags: ['-DSAFETY'],
    panArgs: ['-w22'],
    variants: [
      { broken: 1, edit: 'local deadline counted from the answer, not the send', breaks: /state\[\(1-c\)\]!=/ },
      { broken: 2, edit: 'no margin', breaks: /state\[\(1-c\)\]!=/ },
    ],
  },
  {
    model: 'wait-line',
    file: 'models/wait-line.pml',
    cflags: ['-DSAFETY'],
    panArgs: ['-w22'],
    variants: [
      { broken: 1, edit: 'a release grants the next local waiter without checking', breaks: /holder==0/ },
      { broken: 2, edit: 'a new waiter barges past those queued before it', breaks: /passed\[j\]<=ahead\[j\]/ },
      { broken: 3, edit: 'a wake-up during an attempt in flight is dropped', breaks: /wstate\[queue\[0\]\]/ },
    ],
  },
];

/**
 * Runs a program to its end, in a process group of its own: past STEP_TIMEOUT_MS the group (the program
 * and what it started) is killed. Never rejects.
 */
function run(file, args, opts = {}) {
  return new Promise((resolve) => {
    let stdout = '';
    let stderr = '';
    let killed = false;
    let child;
    try {
      child = spawn(file, args, { cwd: opts.cwd, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    } catch (error) {
      resolve({ code: -1, killed, error, stdout, stderr });
      return;
    }
    const timer = setTimeout(() => {
      killed = true;
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }, STEP_TIMEOUT_MS);
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('error', (error) => {
      clearTimeout(timer);
      resolve({ code: -1, killed, error, stdout, stderr });
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code: code ?? -1, killed, error: null, stdout, stderr });
    });
  });
}

/** The CPU time (user + system, seconds) of the children of the shell that printed `times` last on stderr. */
function childCpuSeconds(stderr) {
  const m = stderr.trimEnd().split('\n').at(-1)?.match(/^(\d+)m([\d.]+)s\s+(\d+)m([\d.]+)s$/);
  return m ? Math.round((Number(m[1]) * 60 + Number(m[2]) + Number(m[3]) * 60 + Number(m[4])) * 100) / 100 : null;
}

/** Why the models cannot be checked here (spin or gcc missing), or null. */
export async function spinMissing() {
  const spin = await run('spin', ['-V']);
  if (spin.code !== 0 || !/Spin Version/.test(spin.stdout)) return 'spin is not installed (Debian package spin)';
  const gcc = await run('gcc', ['--version']);
  if (gcc.code !== 0) return 'gcc is not installed (Debian package gcc)';
  return null;
}

/** What pan printed, as figures. */
export function parsePan(output) {
  const num = (re) => {
    const m = output.match(re);
    return m ? Number(m[1]) : null;
  };
  // "pan:1: assertion violated <expression> (at depth N)": the expression (mtype names print as numbers).
  const violation = output.match(/^pan:\d+:\s*(.+?)\s*\(at depth \d+\)/m)?.[1].replace(/^assertion violated\s+/, '').replace(/\s+/g, ' ') ?? null;
  return {
    errors: num(/errors:\s*(\d+)/),
    statesStored: num(/(\d+)\s+states, stored/),
    depth: num(/depth reached\s+(\d+)/),
    violation,
    // A search that hit a bound says nothing about the states it did not reach.
    incomplete: /max search depth too small|reached -DMEMLIM bound|out of memory|Search not completed/i.test(output),
  };
}

/** Checks one model in one variant (broken 0: the model as it is). Never throws. */
export async function checkVariant(spec, variant, opts = {}) {
  const broken = variant?.broken ?? 0;
  const row = {
    model: spec.model,
    variant: broken === 0 ? 'correct' : `BROKEN=${broken}`,
    edit: variant?.edit ?? '',
    expected: broken === 0 ? 'pass' : 'counter-example',
    result: 'error',
    ok: false,
    errors: null,
    statesStored: null,
    depth: null,
    seconds: null,
    cpuSeconds: null,
    violation: null,
    detail: '',
    dir: null,
    replay: null,
  };
  const dir = await mkdtemp(join(tmpdir(), `pgfence-spin-${spec.model}-`));
  row.dir = dir;
  try {
    const model = join(root, spec.file);
    const defines = broken === 0 ? [] : [`-DBROKEN=${broken}`];
    const spin = await run('spin', ['-a', ...defines, model], { cwd: dir });
    if (spin.code !== 0 || /error/i.test(spin.stdout + spin.stderr)) {
      row.detail = `spin -a failed: ${(spin.stdout + spin.stderr).trim().split('\n').slice(0, 5).join(' | ')}`;
      return row;
    }
    const gcc = await run('gcc', ['-O2', '-w', ...spec.cflags, `-DMEMLIM=${MEMLIM_MB}`, '-o', 'pan', 'pan.c'], { cwd: dir });
    if (gcc.code !== 0) {
      row.detail = `gcc failed: ${gcc.stderr.trim().split('\n').slice(0, 5).join(' | ')}`;
      return row;
    }
    const started = performance.now();
    // Through sh, whose `times` then reports pan's CPU time (the wall time depends on what else runs).
    const pan = await run('sh', ['-c', '"$0" "$@"; status=$?; times >&2; exit $status', join(dir, 'pan'), `-m${MAX_DEPTH}`, ...spec.panArgs], { cwd: dir });
    row.seconds = Math.round((performance.now() - started) / 10) / 100;
    row.cpuSeconds = childCpuSeconds(pan.stderr);
    const output = pan.stdout + pan.stderr;
    const figures = parsePan(output);
    Object.assign(row, { errors: figures.errors, statesStored: figures.statesStored, depth: figures.depth, violation: figures.violation });
    if (pan.killed) {
      row.result = 'timeout';
      row.detail = `pan ran past ${STEP_TIMEOUT_MS / 1000} s`;
    } else if (figures.errors === null) {
      row.detail = `pan printed no figures: ${output.trim().split('\n').slice(0, 5).join(' | ')}`;
    } else if (figures.errors > 0) {
      row.result = 'counter-example';
      // pan names its trail after the model file; spin -t -k replays it step by step.
      if (opts.keep) row.replay = `cd ${dir} && spin -t -p -k ${basename(model)}.trail ${defines.join(' ')} ${model}`.replace(/ {2,}/g, ' ');
      if (broken === 0) row.detail = `${figures.violation ?? 'an error'}${opts.keep ? '' : ' (run with --keep to replay its trail)'}`;
      else if (!variant.breaks.test(figures.violation ?? '')) row.detail = `the counter-example violates ${figures.violation ?? 'something else'}, not the property the variant breaks`;
      row.ok = broken !== 0 && variant.breaks.test(figures.violation ?? '');
    } else if (figures.incomplete) {
      row.result = 'incomplete';
      row.detail = 'the search hit a bound (depth or memory) before it covered every state';
    } else {
      row.result = 'pass';
      row.ok = broken === 0;
      if (broken !== 0) row.detail = 'the broken variant found no counter-example';
    }
    return row;
  } catch (err) {
    row.detail = String(err?.message ?? err);
    return row;
  } finally {
    // A failed check keeps its directory (pan, its trail) with --keep, to replay the counter-example.
    if (!opts.keep) {
      await rm(dir, { recursive: true, force: true });
      row.dir = null;
      row.replay = null;
    }
  }
}

/** Checks every model (or those named in `only`) and each broken variant: one row per check. */
export async function runModels({ only = null, jobs = 1, keep = false } = {}) {
  const specs = MODELS.filter((m) => !only || only.includes(m.model));
  const tasks = specs.flatMap((spec) => [null, ...spec.variants].map((variant) => ({ spec, variant })));
  const rows = new Array(tasks.length);
  let next = 0;
  const worker = async () => {
    while (next < tasks.length) {
      const i = next++;
      rows[i] = await checkVariant(tasks[i].spec, tasks[i].variant, { keep });
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(jobs, tasks.length)) }, worker));
  return rows;
}

/** The rows as a text table. */
export function formatTable(rows) {
  const header = ['model', 'variant', 'result', 'errors', 'states stored', 'depth', 'pan wall', 'pan cpu', 'edit / note'];
  const cells = rows.map((r) => [
    r.model,
    r.variant,
    r.ok ? r.result : `${r.result} (FAIL: expected ${r.expected})`,
    r.errors ?? '-',
    r.statesStored ?? '-',
    r.depth ?? '-',
    r.seconds === null ? '-' : `${r.seconds.toFixed(2)} s`,
    r.cpuSeconds === null ? '-' : `${r.cpuSeconds.toFixed(2)} s`,
    [r.edit, r.variant !== 'correct' && r.violation ? `violates ${r.violation}` : '', r.detail].filter(Boolean).join('; '),
  ].map(String));
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i].length)));
  const numeric = new Set([3, 4, 5, 6, 7]);
  const line = (c) => c.map((v, i) => (i === c.length - 1 ? v : numeric.has(i) ? v.padStart(widths[i]) : v.padEnd(widths[i]))).join('  ').trimEnd();
  return [line(header), line(widths.map((w) => '-'.repeat(w))), ...cells.map(line)].join('\n');
}

async function main(argv) {
  const args = { json: false, keep: false, only: null, jobs: Math.min(2, availableParallelism()) };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--json') args.json = true;
    else if (a === '--keep') args.keep = true;
    else if (a === '--only') args.only = String(argv[++i] ?? '').split(',').filter(Boolean);
    else if (a === '--jobs') args.jobs = Math.max(1, Number(argv[++i]) || 1);
    else {
      console.error(`spin-models: unknown argument ${a}\nusage: node scripts/spin-models.mjs [--json] [--only tokens,leases,wait-line] [--jobs N] [--keep]`);
      return 1;
    }
  }
  const unknown = (args.only ?? []).filter((m) => !MODELS.some((s) => s.model === m));
  if (unknown.length > 0) {
    console.error(`spin-models: no model ${unknown.join(', ')} (models: ${MODELS.map((m) => m.model).join(', ')})`);
    return 1;
  }
  const missing = await spinMissing();
  if (missing) {
    console.error(`spin-models: ${missing}`);
    return 2;
  }
  const version = (await run('spin', ['-V'])).stdout.trim();
  const rows = await runModels(args);
  if (args.json) console.log(JSON.stringify({ spin: version, rows: rows.map(({ ok, ...r }) => ({ ok, ...r })) }, null, 2));
  else {
    console.log(`${version}; pan -m${MAX_DEPTH}, -DMEMLIM=${MEMLIM_MB}`);
    console.log(formatTable(rows));
    for (const r of rows.filter((r) => r.replay)) console.log(`replay ${r.model} ${r.variant}: ${r.replay}`);
    if (args.keep) console.log(`kept: ${rows.map((r) => r.dir).join(' ')}`);
  }
  const failed = rows.filter((r) => !r.ok);
  if (!args.json) console.log(failed.length === 0 ? `${rows.length} checks as expected` : `${failed.length} of ${rows.length} checks NOT as expected`);
  return failed.length === 0 ? 0 : 1;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code;
    },
    (err) => {
      console.error(err);
      process.exitCode = 1;
    },
  );
}
