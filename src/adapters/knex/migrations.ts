import type { Knex } from 'knex';
import { InvalidArgumentError } from '../../core/index.js';
import type { MigrationFolders } from '../../migrate/index.js';
import { type SchemaMigrationStep, schemaMigrationSteps } from '../shared/index.js';
import type { AnyKnex } from './raw.js';
import { knexSqlExecutor } from './sql-executor.js';

/** One of pgfence's migrations as the migration source lists it (Knex passes it back to getMigration()). */
export interface PgfenceMigrationSpec {
  readonly name: string;
}

/**
 * Knex's `Migration` for one of pgfence's steps. `down()` does nothing: rolling back leaves pgfence's
 * schema in place (Knex only forgets the names, and a later `latest` checks them again, applying nothing).
 *
 * @example
 * ```ts fragment
 * import { knex } from 'knex';
 * import { pgfenceMigrations } from 'pgfence/knex';
 *
 * const db = knex({ client: 'pg', connection: url });
 * const source = pgfenceMigrations();
 * const [first] = await source.getMigrations();
 * await db.transaction(async (trx) => (await source.getMigration(first!)).up(trx)); // as Knex's migrator would
 * ```
 */
export interface PgfenceKnexMigration extends Knex.Migration {
  /**
   * Applies the step in `knex`'s transaction, or in a transaction of its own on a Knex instance
   * (a migrator run with `disableTransactions`).
   *
   * @example
   * ```ts fragment
   * import { knex } from 'knex';
   * import { pgfenceMigrations } from 'pgfence/knex';
   *
   * const db = knex({ client: 'pg', connection: url });
   * const source = pgfenceMigrations();
   * for (const m of await source.getMigrations()) await (await source.getMigration(m)).up(db); // each in a transaction of its own
   * ```
   */
  up(knex: AnyKnex): Promise<void>;
  /**
   * Does nothing: pgfence's schema stays (other services may hold locks in it).
   *
   * @example
   * ```ts fragment
   * import { knex } from 'knex';
   * import { pgfenceMigrations } from 'pgfence/knex';
   *
   * const db = knex({ client: 'pg', connection: url });
   * await db.migrate.rollback({ migrationSource: pgfenceMigrations(), tableName: 'pgfence_knex_migrations' }, true); // forgets the names only
   * ```
   */
  down(knex: AnyKnex): Promise<void>;
}

/**
 * Knex's `MigrationSource` for pgfence's schema: pass it as `migrationSource` to `knex.migrate.latest()`.
 *
 * @example
 * ```ts fragment
 * import { knex } from 'knex';
 * import { pgfenceMigrations } from 'pgfence/knex';
 *
 * const db = knex({ client: 'pg', connection: url });
 * await db.migrate.latest({ migrationSource: pgfenceMigrations(), tableName: 'pgfence_knex_migrations' });
 * ```
 */
export interface PgfenceMigrationSource extends Knex.MigrationSource<PgfenceMigrationSpec> {
  /**
   * pgfence's migrations, in the order Knex runs them (Knex's `loadExtensions` does not apply).
   *
   * @example
   * ```ts fragment
   * import { pgfenceMigrations } from 'pgfence/knex';
   *
   * console.log((await pgfenceMigrations().getMigrations()).map((m) => m.name)); // [ '0001_schema', ... ]
   * ```
   */
  getMigrations(loadExtensions?: readonly string[]): Promise<PgfenceMigrationSpec[]>;
  /**
   * The name Knex records in its history table: the spec's `name`.
   *
   * @example
   * ```ts fragment
   * import { pgfenceMigrations } from 'pgfence/knex';
   *
   * const source = pgfenceMigrations();
   * console.log((await source.getMigrations()).map((m) => source.getMigrationName(m)));
   * ```
   */
  getMigrationName(migration: PgfenceMigrationSpec): string;
  /**
   * The migration of a spec this source listed (InvalidArgumentError for any other).
   *
   * @example
   * ```ts fragment
   * import { pgfenceMigrations } from 'pgfence/knex';
   *
   * const source = pgfenceMigrations();
   * const [first] = await source.getMigrations();
   * console.log(typeof (await source.getMigration(first!)).up); // 'function'
   * ```
   */
  getMigration(migration: PgfenceMigrationSpec): Promise<PgfenceKnexMigration>;
}

/**
 * pgfence's schema as a Knex migration source, for services that migrate with Knex rather than with
 * `migrate()`. Give it a history table of its own next to yours (Knex's order and "missing file" checks
 * are per table, and pgfence's names would interleave with your files'):
 *
 * ```ts
 * await knex.migrate.latest({ migrationSource: pgfenceMigrations(), tableName: 'pgfence_knex_migrations' });
 * ```
 *
 * - Each `migrations/NNNN_name.sql` is a migration named `NNNN_name`. Its up() applies the file and
 *   records it in `pgfence.schema_migrations`, or only checks it when already recorded there: this path
 *   and `migrate()` share one history, so either may run first and no file is applied twice. An applied
 *   file that was since edited fails the run with code PGFENCE_MIGRATION_EDITED.
 * - The repeatable `sql/` definitions form one last migration, `NNNN~definitions-rRRRR-<checksum>`: a
 *   changed set gets a new name, so Knex runs it, and it re-applies the changed files. Earlier names stay
 *   on offer as no-ops, so Knex's check that every recorded name still exists passes.
 * - up() takes the same advisory lock as `migrate()` (for its transaction), so instances running either
 *   path at once are safe. With `disableTransactions: true`, each up() opens its own transaction.
 *
 * @example
 * ```ts fragment
 * import { knex } from 'knex';
 * import { pgfenceMigrations } from 'pgfence/knex';
 *
 * const db = knex({ client: 'pg', connection: url });
 * const [, applied] = await db.migrate.latest({ migrationSource: pgfenceMigrations(), tableName: 'pgfence_knex_migrations' });
 * console.log(applied); // the names run this time
 * ```
 */
export function pgfenceMigrations(): PgfenceMigrationSource {
  return migrationSourceFor();
}

/** The source over any folders (tests point it at fixtures; omitted, the package's own). */
export function migrationSourceFor(folders?: MigrationFolders): PgfenceMigrationSource {
  // The steps of the last listing, by name: what getMigration() runs for a name Knex was given.
  const steps = new Map<string, SchemaMigrationStep>();
  return {
    async getMigrations() {
      const listed = await schemaMigrationSteps(folders);
      for (const step of listed) steps.set(step.name, step);
      return listed.map((step) => ({ name: step.name }));
    },
    getMigrationName: (migration) => migration.name,
    async getMigration(migration) {
      const step = steps.get(migration.name);
      if (!step) throw new InvalidArgumentError('migration', `"${migration.name}" is not one of pgfence's migrations (list them with getMigrations() first)`);
      return {
        up: (knex: AnyKnex) => inTransaction(knex, step),
        down: async () => {},
      };
    },
  };
}

/** Runs the step in Knex's transaction, or in one of its own when the migrator runs without transactions. */
async function inTransaction(knex: AnyKnex, step: SchemaMigrationStep): Promise<void> {
  if (knex.isTransaction) await step.run(knexSqlExecutor(knex, 'knex'));
  else await knex.transaction((trx) => step.run(knexSqlExecutor(trx, 'knex')));
}
