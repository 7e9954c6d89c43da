// examples/other-languages/: one program per language (psql, Python with psycopg, Go with pgx, Java
// with pgjdbc), run as a user runs it, with the real client, against a migrated database of its own:
// a lease and a fenced write, a fenced session lock and a fenced write, a stale write refused.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { lockKey } from '../src/index.js';
import { capabilityMissing } from './support/capability.js';
import { type ClientName, GO_ENV, PGJDBC_JAR, probeClient, SYSTEM_PYTHON } from './support/clients.js';
import { queryOnce, useMigratedDatabase } from './support/db.js';
import { childEnv, startProcess } from './support/process.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const dir = 'examples/other-languages';

/** How each program is run (as docs/other-languages.md shows), with DATABASE_URL or the PG* environment in `env`. */
const PROGRAMS: Record<ClientName, { file: string; command(env: NodeJS.ProcessEnv): [string, string[], NodeJS.ProcessEnv] }> = {
  // psql takes the URL as its database argument; "" (DATABASE_URL unset) leaves it to the PG* variables.
  psql: { file: `${dir}/invoice.sql`, command: (env) => ['psql', ['-X', '-f', `${dir}/invoice.sql`, env.DATABASE_URL ?? ''], env] },
  python: { file: `${dir}/invoice.py`, command: (env) => [SYSTEM_PYTHON, [`${dir}/invoice.py`], env] },
  go: { file: `${dir}/invoice.go`, command: (env) => ['go', ['run', `${dir}/invoice.go`], { ...env, ...GO_ENV }] },
  java: { file: `${dir}/Invoice.java`, command: (env) => ['java', ['-cp', PGJDBC_JAR, `${dir}/Invoice.java`], env] },
};

const KEY = lockKey('invoice:42').toString();

/** What every program prints when all went well. */
function expectedOutput(lease: bigint, lock: bigint): string {
  return [
    `key of invoice:42: ${KEY}`,
    `lease: token ${lease}`,
    'lease: fenced write applied (invoice 42 paid)',
    'lease: released',
    `session lock: token ${lock}`,
    'session lock: fenced write applied (invoice 42 shipped)',
    `stale token ${lease}: write refused (invoice 42 holds token ${lock})`,
    'session lock: released',
    '',
  ].join('\n');
}

async function run(client: ClientName, env: NodeJS.ProcessEnv) {
  const [command, args, childEnvironment] = PROGRAMS[client].command(env);
  // Go compiles pgx on its first run (tens of seconds on a cold build cache).
  return startProcess(command, args, { env: childEnvironment, cwd: root, timeoutMs: 240_000 }).done;
}

/** A successful run: its tokens, after checking the output line for line. */
async function runOk(client: ClientName, env: NodeJS.ProcessEnv): Promise<{ lease: bigint; lock: bigint }> {
  const r = await run(client, env);
  const detail = `${client} exited ${r.code ?? r.signal}:\n${r.stdout}${r.stderr}`;
  expect(r.code, detail).toBe(0);
  const lease = BigInt(/^lease: token (\d+)$/m.exec(r.stdout)?.[1] ?? 0);
  const lock = BigInt(/^session lock: token (\d+)$/m.exec(r.stdout)?.[1] ?? 0);
  expect(r.stdout, detail).toBe(expectedOutput(lease, lock));
  expect(r.stderr, detail).toBe('');
  expect(lock > lease, `session lock token ${lock} above the lease's ${lease}`).toBe(true);
  return { lease, lock };
}


describe.each(Object.keys(PROGRAMS) as ClientName[])('examples/other-languages with %s', (client) => {
  const probe = probeClient(client);
  const skip = capabilityMissing(`OTHER-LANGUAGE EXAMPLE (${client})`, probe.unavailable);

  it.skipIf(skip)(`${PROGRAMS[client].file}: lease and session lock, each with a fenced write; the stale token refused; a refused write exits non-zero`, async () => {
    console.log(`[pgfence tests] ${client}: ${probe.version}`);
    const db = await useMigratedDatabase(`lang_${client}`);
    const u = new URL(db.url);

    const first = await runOk(client, childEnv({ DATABASE_URL: db.url }));
    // Again, from the PG* environment alone: the tables exist now, the tokens go on from the same counter.
    const pgEnv = { PGHOST: u.hostname, PGPORT: u.port || '5432', PGUSER: decodeURIComponent(u.username), PGDATABASE: u.pathname.slice(1), ...(u.password ? { PGPASSWORD: decodeURIComponent(u.password) } : {}) };
    const second = await runOk(client, childEnv(pgEnv));
    expect(second.lease > first.lock).toBe(true);

    // What the database holds: the session lock's write, its token as the key's last, the lease released.
    const [row] = await queryOnce<{ status: string; fencing_token: string }>(db.url, 'SELECT status, fencing_token::text FROM example_invoices WHERE id = 42');
    expect(row).toEqual({ status: 'shipped', fencing_token: String(second.lock) });
    const [counter] = await queryOnce<{ token: string }>(db.url, 'SELECT token::text FROM pgfence.fencing_tokens WHERE key = $1', [KEY]);
    expect(counter!.token).toBe(String(second.lock));
    const liveLeases = 'SELECT token::text, released_at IS NOT NULL AS released FROM pgfence.leases WHERE key = $1';
    expect(await queryOnce(db.url, liveLeases, [KEY])).toEqual([{ token: String(second.lease), released: true }]);

    // A newer holder has written the row: the program's first fenced write is refused, it says so,
    // gives its lease back and exits non-zero.
    await queryOnce(db.url, 'UPDATE example_invoices SET fencing_token = 9223372036854775807 WHERE id = 42');
    const refused = await run(client, childEnv({ DATABASE_URL: db.url }));
    const detail = `${client} exited ${refused.code ?? refused.signal}:\n${refused.stdout}${refused.stderr}`;
    expect(refused.code, detail).not.toBe(0);
    expect(refused.code, detail).not.toBeNull();
    const token = /^lease: token (\d+)$/m.exec(refused.stdout)?.[1];
    expect(refused.stdout, detail).toBe(`key of invoice:42: ${KEY}\nlease: token ${token}\n`);
    expect(refused.stderr, detail).toContain('lease: fenced write refused: a newer holder wrote invoice 42');
    expect(await queryOnce(db.url, liveLeases, [KEY])).toEqual([{ token, released: true }]);
  }, 600_000);
});

describe('docs/other-languages.md', () => {
  // Its program blocks are checked against examples/ by test/docs.test.ts (`file=` blocks).
  it('shows the output a first run prints', () => {
    const doc = readFileSync(join(root, 'docs/other-languages.md'), 'utf8');
    expect(doc).toContain(`\`\`\`text\n${expectedOutput(1n, 2n)}\`\`\`\n`);
  });
});
