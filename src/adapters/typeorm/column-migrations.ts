import type { EntityTarget, MigrationInterface, QueryRunner } from 'typeorm';
import { describeType, InvalidArgumentError, schemaMissingError, sqlState, SQLSTATE } from '../../core/index.js';
import { DEFAULT_FENCING_COLUMN, DEFAULT_VERSION_COLUMN, fencingColumnSql, versionColumnSql } from '../../fencing/index.js';
import { booleanOption, optionKeys, optionsObject } from '../../options.js';
import { dropFencingColumnSql, dropVersionColumnSql } from '../../fencing/index.js';
import { columnName, entityMetadata, tableOf } from './entities.js';
import { typeormSqlExecutor, typeormTarget } from './sql-executor.js';

/** A migration class as TypeORM's `migrations` option takes it: `new DataSource({ ..., migrations: [OrdersFencing] })`. */
export type ColumnMigrationClass = new () => MigrationInterface & { name: string };

export interface FencingColumnMigrationOptions {
  /** The migration's name, ending in a 13-digit timestamp as TypeORM requires: 'OrdersFencing1735689600000'. */
  name: string;
  /** The fencing column: a column name, or an entity property when the table is given as an entity; default 'fencing_token'. */
  column?: string;
  /** Also install the trigger that makes the table refuse a lower token, whoever writes (needs pgfence's schema first). */
  enforce?: boolean;
}

export interface VersionColumnMigrationOptions {
  /** The migration's name, ending in a 13-digit timestamp as TypeORM requires. */
  name: string;
  /** The version column: a column name, or an entity property when the table is given as an entity; default 'version'. */
  column?: string;
}

const FENCING_KEYS = optionKeys<FencingColumnMigrationOptions>({ name: true, column: true, enforce: true });
const VERSION_KEYS = optionKeys<VersionColumnMigrationOptions>({ name: true, column: true });

/**
 * A TypeORM migration class that adds the fencing column (bigint, NULL until the first fenced write) to a
 * table, with `enforce: true` also the trigger that refuses a lower token; its down() drops both. The
 * table: its name (`orders` or `schema.orders`, as migrations usually name tables), or an entity of the
 * DataSource, resolved when the migration runs. Run pgfence's own migrations first when you enforce.
 *
 * ```sql
 * ALTER TABLE "orders" ADD COLUMN IF NOT EXISTS "fencing_token" bigint;
 * DROP TRIGGER IF EXISTS "pgfence_fencing_token" ON "orders";
 * CREATE TRIGGER "pgfence_fencing_token" BEFORE UPDATE ON "orders" FOR EACH ROW EXECUTE FUNCTION pgfence.enforce_fencing_token('fencing_token');
 * ```
 *
 * @example
 * ```ts fragment
 * import { DataSource } from 'typeorm';
 * import { fencingColumnMigration, pgfenceMigrations } from 'pgfence/typeorm';
 *
 * const OrdersFencing = fencingColumnMigration('orders', { name: 'OrdersFencing1735689600000', enforce: true });
 * const dataSource = new DataSource({ type: 'postgres', url: process.env.DATABASE_URL,
 *   migrations: [...(await pgfenceMigrations()), OrdersFencing] });
 * ```
 */
export function fencingColumnMigration(table: EntityTarget<any>, opts: FencingColumnMigrationOptions): ColumnMigrationClass {
  const o = optionsObject<FencingColumnMigrationOptions>(opts, 'fencingColumnMigration options', FENCING_KEYS);
  const enforce = booleanOption(o.enforce, 'enforce', false);
  return columnMigration(table, o, {
    defaultColumn: DEFAULT_FENCING_COLUMN,
    up: (t, column) => fencingColumnSql(t, { column, enforce }),
    down: (t, column) => dropFencingColumnSql(t, { column }),
  });
}

/**
 * A TypeORM migration class that adds a version column (bigint NOT NULL DEFAULT 0) for versionedUpdate;
 * its down() drops it. The table as for fencingColumnMigration. An entity's `@VersionColumn` is TypeORM's
 * to create: this is for a table whose version column TypeORM does not map.
 *
 * @example
 * ```ts fragment
 * import { versionColumnMigration } from 'pgfence/typeorm';
 *
 * const DocumentsVersion = versionColumnMigration('documents', { name: 'DocumentsVersion1735689600001' });
 * console.log(new DocumentsVersion().name);
 * ```
 */
export function versionColumnMigration(table: EntityTarget<any>, opts: VersionColumnMigrationOptions): ColumnMigrationClass {
  const o = optionsObject<VersionColumnMigrationOptions>(opts, 'versionColumnMigration options', VERSION_KEYS);
  return columnMigration(table, o, {
    defaultColumn: DEFAULT_VERSION_COLUMN,
    up: (t, column) => versionColumnSql(t, { column }),
    down: (t, column) => dropVersionColumnSql(t, { column }),
  });
}

/** TypeORM reads a migration's order from the last 13 characters of its name. */
const TIMESTAMPED = /\d{13}$/;

function timestampedName(name: unknown): string {
  if (typeof name !== 'string' || !TIMESTAMPED.test(name) || Number(name.slice(-13)) === 0) {
    const got = typeof name === 'string' ? `"${name.slice(0, 80)}"` : describeType(name);
    throw new InvalidArgumentError('name', `a TypeORM migration name ends in a 13-digit timestamp, as in 'OrdersFencing1735689600000'; got ${got}`);
  }
  return name;
}

function columnMigration(
  table: unknown,
  o: Partial<VersionColumnMigrationOptions>,
  sql: { defaultColumn: string; up(table: string, column: string): string; down(table: string, column: string): string },
): ColumnMigrationClass {
  const name = timestampedName(o.name);
  if (typeof table === 'string') sql.up(table, o.column ?? sql.defaultColumn); // a bad table or column name is refused now, not when the migration runs
  else if (typeof table !== 'function' && (typeof table !== 'object' || table === null)) {
    throw new InvalidArgumentError('table', `expected a table name or an entity, got ${describeType(table)}`);
  }
  /** The table and column in SQL: as given, or the entity's, read from the DataSource the migration runs in. */
  const resolve = (runner: QueryRunner): [string, string] => {
    if (typeof table === 'string') return [table, o.column ?? sql.defaultColumn];
    const metadata = entityMetadata(typeormTarget(runner, 'queryRunner').dataSource, table, 'table');
    return [tableOf(metadata), columnName(metadata, o.column ?? sql.defaultColumn)];
  };
  const migration = class implements MigrationInterface {
    name = name;
    async up(runner: QueryRunner): Promise<void> {
      await run(runner, sql.up(...resolve(runner)));
    }
    async down(runner: QueryRunner): Promise<void> {
      await run(runner, sql.down(...resolve(runner)));
    }
  };
  Object.defineProperty(migration, 'name', { value: name });
  return migration;
}

async function run(runner: QueryRunner, script: string): Promise<void> {
  try {
    await typeormSqlExecutor(typeormTarget(runner, 'queryRunner'), { scriptResults: false }).script(script);
  } catch (err) {
    // The trigger's function is pgfence's: without its schema, say so (a missing table is the caller's to see).
    const code = sqlState(err);
    throw (code === SQLSTATE.undefinedFunction || code === SQLSTATE.invalidSchemaName ? schemaMissingError(err) : null) ?? err;
  }
}
