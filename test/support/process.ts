import { type ChildProcess, spawn } from 'node:child_process';
import { afterAll } from 'vitest';
import { eventually } from './db.js';

/** How a child process ended, with everything it printed. */
export interface Finished {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export interface Started {
  proc: ChildProcess;
  /** Its output so far. */
  out: { stdout: string; stderr: string };
  done: Promise<Finished>;
  /** Waits (bounded) until its stdout has a line matching `pattern`; the match. */
  line(pattern: RegExp, timeoutMs?: number): Promise<RegExpExecArray>;
}

const running = new Set<ChildProcess>();
afterAll(() => {
  for (const proc of running) proc.kill('SIGKILL');
});

/**
 * The environment for a child: the suite's, minus DATABASE_URL and the PG* variables (whoever runs the
 * suite must not decide which database a child uses), plus `vars`.
 */
export function childEnv(vars: Record<string, string>): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const name of Object.keys(env)) if (name === 'DATABASE_URL' || name.startsWith('PG')) delete env[name];
  return { ...env, ...vars };
}

/**
 * A child process with its output collected. It is killed (SIGKILL) if it outlives `timeoutMs`, and
 * when the test file ends, so that no test hangs on it. `stdin: true` leaves its stdin open as a pipe.
 */
export function startProcess(command: string, args: string[], opts: { env: NodeJS.ProcessEnv; timeoutMs: number; cwd?: string; stdin?: boolean }): Started {
  const proc = spawn(command, args, { env: opts.env, cwd: opts.cwd, stdio: [opts.stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'] });
  running.add(proc);
  const out = { stdout: '', stderr: '' };
  proc.stdout!.on('data', (d: Buffer) => (out.stdout += d.toString()));
  proc.stderr!.on('data', (d: Buffer) => (out.stderr += d.toString()));
  const timer = setTimeout(() => {
    out.stderr += `\n[killed: still running after ${opts.timeoutMs} ms]`;
    proc.kill('SIGKILL');
  }, opts.timeoutMs);
  const done = new Promise<Finished>((resolve) => {
    proc.on('error', (err) => (out.stderr += `\n[${err.message}]`));
    proc.on('close', (code, signal) => {
      clearTimeout(timer);
      running.delete(proc);
      resolve({ code, signal, ...out });
    });
  });
  const line = async (pattern: RegExp, timeoutMs = 30_000) => {
    const re = new RegExp(pattern.source, pattern.flags.includes('m') ? pattern.flags : `${pattern.flags}m`);
    await eventually(() => re.test(out.stdout) || proc.exitCode !== null || proc.signalCode !== null, timeoutMs, `${command}: a line matching ${pattern}`);
    const m = re.exec(out.stdout);
    if (!m) throw new Error(`${command} ended without printing ${pattern}:\n${out.stdout}${out.stderr}`);
    return m;
  };
  return { proc, out, done, line };
}

/** No process with this pid exists any more (exited and reaped): signal 0 checks without sending anything. */
export function processGone(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return false;
  } catch {
    return true;
  }
}
