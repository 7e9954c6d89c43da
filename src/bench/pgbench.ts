/**
 * pgbench, PostgreSQL's own C client, running a script on one connection: the SQL interface as
 * another language calls it, with next to no client overhead. One run is one round of a measurement.
 */

import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** pgbench's version line, or null when it cannot run here. */
export function pgbenchVersion(): string | null {
  try {
    return execFileSync('pgbench', ['--version'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], timeout: 10_000 }).trim();
  } catch {
    return null;
  }
}

/** Script files in a directory of their own (`remove()` deletes it). */
export function pgbenchScripts<K extends string>(scripts: Record<K, string>): { files: Record<K, string>; remove(): void } {
  const dir = mkdtempSync(join(tmpdir(), 'pgfence-pgbench-'));
  const files = {} as Record<K, string>;
  for (const [name, text] of Object.entries(scripts) as [K, string][]) {
    files[name] = join(dir, `${name}.sql`);
    writeFileSync(files[name], text);
  }
  return { files, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

/**
 * Runs `transactions` runs of a script file on one connection (prepared statements, as the bench's
 * baselines use); the runs per second after the first one. The first run is left out: in a new
 * connection it also prepares the statements and compiles the PL/pgSQL functions it calls (tens of
 * ms), a cost a long-lived client pays once. The rate is read from pgbench's per-run log (the time
 * each run ended). Throws when pgbench fails or any run failed (a script refuses an outcome it does
 * not expect by failing a statement).
 */
export function pgbenchRate(url: string, file: string, transactions: number, vars: Record<string, string>): Promise<number> {
  const logDir = mkdtempSync(join(tmpdir(), 'pgfence-pgbench-log-'));
  const args = ['--no-vacuum', '--protocol=prepared', '--client=1', `--transactions=${Math.max(2, transactions)}`, `--file=${file}`];
  args.push('--log', `--log-prefix=${join(logDir, 'run')}`);
  for (const [name, value] of Object.entries(vars)) args.push(`--define=${name}=${value}`);
  return new Promise<number>((resolve, reject) => {
    // The URL goes in PGDATABASE (pgbench expands a connection string there), not on a command line
    // that ps shows, nor in an error message.
    const env = { ...process.env, PGDATABASE: url };
    execFile('pgbench', args, { encoding: 'utf8', timeout: 600_000, env }, (err, stdout, stderr) => {
      const processed = /number of transactions actually processed: (\d+)\/(\d+)/.exec(stdout);
      if (err || !processed || processed[1] !== processed[2]) {
        const how = err ? `exited ${err.code ?? err.signal}` : 'incomplete';
        reject(new Error(`pgbench ${file} ${how}: ${stderr.trim().split('\n').slice(-3).join(' | ')}`));
        return;
      }
      // One line per run: client, run number, latency (µs), script, end time (s, µs).
      const ends = readdirSync(logDir)
        .flatMap((f) => readFileSync(join(logDir, f), 'utf8').trim().split('\n'))
        .map((line) => line.split(' ').map(Number))
        .map((f) => f[4]! * 1e6 + f[5]!)
        .sort((a, b) => a - b);
      resolve(((ends.length - 1) * 1e6) / (ends.at(-1)! - ends[0]!));
    });
  }).finally(() => rmSync(logDir, { recursive: true, force: true }));
}
