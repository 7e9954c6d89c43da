import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, inject } from 'vitest';
import { sleep } from '../../src/core/signals.js';

/** The test server's URL with another database (and optionally other parameters). */
export function withDatabase(url: string, database: string, params: Record<string, string> = {}): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  for (const [k, v] of Object.entries(params)) u.searchParams.set(k, v);
  return u.toString();
}

/** Databases this test file created; dropped after the file (hooks cannot be added from inside a hook). */
const created: string[] = [];
/** Lockers (anything closable) this test file opened; closed after it, before its databases go. */
const opened = new Set<{ close(): Promise<void> }>();

/** Remembers a locker (or anything with close()) to close after the file; returns it. */
export function track<T extends { close(): Promise<void> }>(closable: T): T {
  opened.add(closable);
  return closable;
}

afterAll(async () => {
  await Promise.all([...opened].map((c) => c.close()));
  opened.clear();
  if (created.length === 0) return;
  const c = new pg.Client({ connectionString: inject('databaseUrl') });
  await c.connect();
  try {
    for (const name of created.splice(0)) await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  } finally {
    await c.end();
  }
});

/**
 * A database of the test file's own, created on first use and dropped after the file, so files run in
 * parallel without seeing each other's locks, tables or tokens.
 */
export async function useTestDatabase(label: string): Promise<{ url: string; name: string; urlWith(params: Record<string, string>): string }> {
  const base = inject('databaseUrl');
  const name = `pgfence_${label.replace(/[^a-z0-9_]/gi, '_').toLowerCase()}_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: base });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name}`);
    created.push(name);
  } finally {
    await admin.end();
  }
  const url = withDatabase(base, name);
  return { url, name, urlWith: (params) => withDatabase(base, name, params) };
}

/** A unique application_name, to find (and kill) exactly one locker's backends. */
export function appName(label: string): string {
  return `pgfence_test_${label}_${randomBytes(3).toString('hex')}`;
}

/** One statement on a connection of its own to `url` (opened and closed around it); its rows. */
export async function queryOnce<R extends pg.QueryResultRow = pg.QueryResultRow>(url: string, text: string, values: unknown[] = []): Promise<R[]> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query<R>(text, values)).rows;
  } finally {
    await c.end();
  }
}

/**
 * Terminates every backend of an application_name; resolves with how many there were. With `waitMs`,
 * each kill waits (up to that long) for its backend to exit, so what it held is free once this resolves.
 */
export async function killBackends(url: string, applicationName: string, waitMs = 0): Promise<number> {
  const rows = await queryOnce<{ n: number }>(
    url,
    `SELECT count(*)::int AS n FROM (SELECT pg_terminate_backend(pid, $2) FROM pg_stat_activity
      WHERE application_name = $1 AND pid <> pg_backend_pid()) t`,
    [applicationName, waitMs],
  );
  return rows[0]!.n;
}

export { sleep };

/** Polls `check` until it returns true or `timeoutMs` passes (generous bounds: tests assert outcomes, not timing). */
export async function eventually(check: () => boolean | Promise<boolean>, timeoutMs = 15_000, what = 'condition'): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (await check()) return;
    await sleep(20);
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** The test URL pointed at a local port where nothing listens. */
export async function freePortUrl(url: string): Promise<string> {
  const { freePort } = await import('./server.js');
  const u = new URL(url);
  u.hostname = '127.0.0.1';
  u.port = String(await freePort());
  return u.toString();
}

/** A database of the file's own with pgfence's schema applied. */
export async function useMigratedDatabase(label: string): Promise<Awaited<ReturnType<typeof useTestDatabase>>> {
  const db = await useTestDatabase(label);
  const { migrate } = await import('../../src/migrate/index.js');
  await migrate({ connectionString: db.url });
  return db;
}
