import type { MigrationInterface, QueryRunner } from 'typeorm';
import { PgfenceError, type SqlExecutor } from '../../core/index.js';
import type { MigrationFolders } from '../../migrate/index.js';
import { schemaMigrationSteps } from '../shared/index.js';
import { typeormSqlExecutor, typeormTarget } from './sql-executor.js';

/** One of pgfence's migrations as a TypeORM migration class (for the DataSource's `migrations` option). */
export type PgfenceMigrationClass = new () => MigrationInterface & { name: string };

/**
 * pgfence's schema as TypeORM migration classes, for services that migrate with TypeORM rather than
 * with `migrate()`: put them in the DataSource's `migrations`, next to yours, and run
 * `dataSource.runMigrations()` (or TypeORM's `migration:run`).
 *
 * - Each `migrations/NNNN_name.sql` is a migration; its up() applies the file and records it in
 *   `pgfence.schema_migrations`, or only checks it when already recorded there: this path and
 *   `migrate()` share one history, so either may run first and no file is applied twice. An applied
 *   file that was since edited fails the run with code PGFENCE_MIGRATION_EDITED.
 * - The repeatable `sql/` definitions form one last migration, renamed whenever they change, so that
 *   TypeORM runs it again; it re-applies the changed files. Earlier names stay on offer as no-ops.
 * - TypeORM orders migrations by the 13-digit timestamp that ends each name, and runs every one it has
 *   not recorded. pgfence's names carry small numbers made from their own order (the file's number,
 *   then the definitions' revision: `pgfence_0003_lease_hold_until_0000000300000`,
 *   `pgfence_0003~definitions-r0016-940a5cb8_0000000300016`), so they run before your migrations on an
 *   empty database (your fencing column's trigger needs them), and the ones a later pgfence adds sort
 *   after the ones before them.
 * - up() takes the same advisory lock as `migrate()` (for its transaction), so instances running either
 *   path at once are safe. With `migrationsTransactionMode: 'none'`, each up() opens its own transaction.
 * - down() leaves pgfence's schema in place (reverting one only forgets that TypeORM ran it; running it
 *   again changes nothing).
 *
 * @example
 * ```ts fragment
 * import { DataSource } from 'typeorm';
 * import { pgfenceMigrations } from 'pgfence/typeorm';
 *
 * const dataSource = new DataSource({ type: 'postgres', url: process.env.DATABASE_URL, migrations: await pgfenceMigrations() });
 * await dataSource.initialize();
 * console.log((await dataSource.runMigrations()).map((m) => m.name)); // what it applied
 * ```
 */
export function pgfenceMigrations(): Promise<PgfenceMigrationClass[]> {
  return migrationClassesFor();
}

/** The classes over any folders (tests point it at fixtures; omitted, the package's own). */
export async function migrationClassesFor(folders?: MigrationFolders): Promise<PgfenceMigrationClass[]> {
  return (await schemaMigrationSteps(folders)).map((step) => {
    const name = typeormMigrationName(step.name);
    const migration = class implements MigrationInterface {
      name = name;
      async up(runner: QueryRunner): Promise<void> {
        await inTransaction(runner, (sql) => step.run(sql));
      }
      async down(): Promise<void> {
        // pgfence's schema stays: see pgfenceMigrations().
      }
    };
    Object.defineProperty(migration, 'name', { value: name });
    return migration;
  });
}

/** TypeORM's order is numeric: a file NNNN_x is NNNN·10⁵, the definitions NNNN~definitions-rRRRR after it, NNNN·10⁵ + RRRR. */
const FILE_STEP = /^(\d{4})_/;
const DEFINITIONS_STEP = /^(\d{4})~definitions-r(\d{4})-/;

/** A step's name for TypeORM: prefixed, and ending in the 13-digit number TypeORM sorts by. */
export function typeormMigrationName(step: string): string {
  const file = FILE_STEP.exec(step);
  const definitions = DEFINITIONS_STEP.exec(step);
  const order = file ? Number(file[1]) * 100_000 : definitions ? Number(definitions[1]) * 100_000 + Number(definitions[2]) : NaN;
  if (!(order > 0)) throw new PgfenceError('PGFENCE_MIGRATION_INVALID', `pgfence migration "${step}": expected NNNN_name or NNNN~definitions-rRRRR-<checksum>`);
  return `pgfence_${step}_${String(order).padStart(13, '0')}`;
}

/** Runs `work` in TypeORM's transaction, or one of its own when TypeORM runs the migration without one. */
async function inTransaction(runner: QueryRunner, work: (sql: SqlExecutor) => Promise<void>): Promise<void> {
  const sql = typeormSqlExecutor(typeormTarget(runner, 'queryRunner'), { scriptResults: false });
  if (runner.isTransactionActive) return work(sql);
  await runner.startTransaction();
  try {
    await work(sql);
    await runner.commitTransaction();
  } catch (err) {
    await runner.rollbackTransaction().catch(() => {}); // the work's failure is the one to report
    throw err;
  }
}
