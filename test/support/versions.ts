import { readFileSync } from 'node:fs';
import type { Kysely } from 'kysely';
import type { PgfenceMigrationProvider } from '../../src/adapters/kysely/migrations.js';

const root = new URL('../../', import.meta.url);

/**
 * The version of a dependency as installed for this run: .ci/run's matrix installs different majors
 * (kysely 0.28/0.29, pg-boss 10/12), and the tests that differ by major branch on it. Read from the
 * file: kysely 0.29's exports map does not export its package.json.
 */
export function installedVersion(name: string): [major: number, minor: number, patch: number] {
  const { version } = JSON.parse(readFileSync(new URL(`node_modules/${name}/package.json`, root), 'utf8')) as { version: string };
  const [major = 0, minor = 0, patch = 0] = version.split(/[.-]/).map(Number);
  return [major, minor, patch];
}

/** Whether the installed `name` is at least major.minor. */
export function installedAtLeast(name: string, major: number, minor = 0): boolean {
  const [a, b] = installedVersion(name);
  return a > major || (a === major && b >= minor);
}

/** What the tests use of Kysely's Migrator. */
export interface TestMigrator {
  migrateToLatest(): Promise<{ error?: unknown; results?: { migrationName: string; status: string }[] }>;
}
type MigratorClass = new (props: {
  db: Kysely<any>;
  provider: PgfenceMigrationProvider;
  migrationTableName?: string;
  migrationLockTableName?: string;
  disableTransactions?: boolean;
}) => TestMigrator;

/** Kysely's Migrator: exported by 'kysely' up to 0.28, by 'kysely/migration' from 0.29 (where the root's is a type error). */
export async function kyselyMigrator(): Promise<MigratorClass> {
  const specifier = installedAtLeast('kysely', 0, 29) ? 'kysely/migration' : 'kysely';
  return ((await import(specifier)) as { Migrator: MigratorClass }).Migrator;
}

/** What the tests use of a PgBoss instance. */
export interface TestBoss {
  on(event: 'error', listener: (err: unknown) => void): unknown;
  start(): Promise<unknown>;
  stop(options?: { graceful?: boolean; timeout?: number }): Promise<void>;
  createQueue(name: string, options?: { retryLimit?: number; retryDelay?: number; expireInSeconds?: number }): Promise<unknown>;
  send(name: string, data: object, options?: { expireInSeconds?: number }): Promise<string | null>;
  getJobById<T>(name: string, id: string): Promise<{ id: string; state: string; retryCount: number; output: unknown; data: T } | null>;
  work(name: string, options: object, handler: (jobs: any[]) => Promise<unknown>): Promise<string>;
  fail(name: string, id: string, data: object): Promise<unknown>;
}
type BossClass = new (options: { connectionString: string; max?: number; supervise?: boolean; schedule?: boolean }) => TestBoss;

/** pg-boss's class: the default export up to 11 (CommonJS `export =`), the named export `PgBoss` in 12. */
export async function pgBossClass(): Promise<BossClass> {
  const mod = (await import('pg-boss')) as unknown as { PgBoss?: BossClass; default?: BossClass };
  const PgBoss = mod.PgBoss ?? mod.default;
  if (!PgBoss) throw new Error('pg-boss exports neither PgBoss nor a default export');
  return PgBoss;
}
