import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';

/**
 * The clients of other languages that examples/other-languages/ and the cross-language race run
 * with, as Debian installs them (.ci/run installs the packages).
 */

/** Debian's psycopg (python3-psycopg) imports only under the system Python, not another python3 first on PATH. */
export const SYSTEM_PYTHON = '/usr/bin/python3';
/** Debian's pgx v4 (golang-github-jackc-pgx-v4-dev) is a GOPATH package, not a module. */
export const GO_ENV = { GOPATH: '/usr/share/gocode', GO111MODULE: 'off' };
/** Debian's pgjdbc (libpostgresql-jdbc-java). */
export const PGJDBC_JAR = '/usr/share/java/postgresql.jar';

export type ClientName = 'psql' | 'python' | 'go' | 'java';

/** What a client is (its versions, for the log), or why it cannot run here. */
export type Probe = { version: string; unavailable: null } | { version: null; unavailable: string };

/** What a command printed (stdout, else stderr: `java -version` writes there), first line; throws if it fails. */
function output(command: string, args: string[], env: Record<string, string> = {}): string {
  const r = spawnSync(command, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 60_000, env: { ...process.env, ...env } });
  if (r.error) throw r.error;
  if (r.status !== 0) throw new Error(`${command} ${args.join(' ')} exited ${r.status}: ${r.stderr.trim()}`);
  return (r.stdout.trim() || r.stderr.trim()).split('\n')[0]!;
}

const PROBES: Record<ClientName, { packages: string; probe(): string }> = {
  psql: { packages: 'postgresql-client', probe: () => output('psql', ['--version']) },
  python: {
    packages: 'python3-psycopg',
    probe: () => output(SYSTEM_PYTHON, ['-c', 'import sys, psycopg; print(f"psycopg {psycopg.__version__}, Python {sys.version.split()[0]}")']),
  },
  go: {
    packages: 'golang-go golang-github-jackc-pgx-v4-dev',
    probe: () => {
      const go = output('go', ['version']);
      output('go', ['list', 'github.com/jackc/pgx/v4'], GO_ENV);
      return `${go}, pgx v4 ${debianVersion('golang-github-jackc-pgx-v4-dev')}`;
    },
  },
  java: {
    packages: 'default-jdk-headless libpostgresql-jdbc-java',
    probe: () => {
      if (!existsSync(PGJDBC_JAR)) throw new Error(`no ${PGJDBC_JAR}`);
      // The single-file source launcher (java File.java) needs a JDK's compiler, not only a JRE.
      output('javac', ['-version']);
      return `${output('java', ['-version'])}, pgjdbc ${debianVersion('libpostgresql-jdbc-java')}`;
    },
  },
};

const debianVersion = (pkg: string) => {
  try {
    return output('dpkg-query', ['-W', '-f', '${Version}', pkg]);
  } catch {
    return '(not from a Debian package)';
  }
};

const probed = new Map<ClientName, Probe>();

/** Probes a client once per test file: it runs (and reports its version) or says what to install. */
export function probeClient(name: ClientName): Probe {
  let p = probed.get(name);
  if (!p) {
    const { packages, probe } = PROBES[name];
    try {
      p = { version: probe(), unavailable: null };
    } catch (err) {
      const why = err instanceof Error ? err.message.split('\n')[0] : String(err);
      p = { version: null, unavailable: `the ${name} client cannot run (${why}): install the Debian packages ${packages}` };
    }
    probed.set(name, p);
  }
  return p;
}
