import { booleanOption, optionKeys, optionsObject } from '../options.js';
import { bareIdentifier, DEFAULT_FENCING_COLUMN, quoteColumn, quoteTable } from './identifiers.js';

/** The version column of a versioned table (versionedUpdate) unless the caller names another. */
export const DEFAULT_VERSION_COLUMN = 'version';

export interface FencingColumnOptions {
  /** Default 'fencing_token'. */
  column?: string;
  /**
   * Also install a trigger (pgfence.enforce_fencing_token, from sql/: run migrate() first) that makes
   * the table refuse an UPDATE lowering the token, whoever writes.
   */
  enforce?: boolean;
}
const FENCING_COLUMN_OPTION_KEYS = optionKeys<FencingColumnOptions>({ column: true, enforce: true });

/**
 * The SQL that adds a fencing column (bigint, NULL until first fenced write) to one of your tables. Idempotent.
 *
 * @example
 * ```ts fragment
 * await pool.query(fencingColumnSql('invoices', { enforce: true })); // the column, and the trigger that refuses a lower token
 * ```
 */
export function fencingColumnSql(table: string, opts?: FencingColumnOptions): string {
  const o = optionsObject<FencingColumnOptions>(opts, 'fencingColumnSql options', FENCING_COLUMN_OPTION_KEYS);
  const t = quoteTable(table);
  const column = quoteColumn(o.column ?? DEFAULT_FENCING_COLUMN, 'column');
  const statements = [`ALTER TABLE ${t} ADD COLUMN IF NOT EXISTS ${column} bigint;`];
  if (booleanOption(o.enforce, 'enforce', false)) {
    const trigger = quoteColumn(`pgfence_${bareIdentifier(column)}`.slice(0, 63), 'column');
    statements.push(
      `DROP TRIGGER IF EXISTS ${trigger} ON ${t};`,
      `CREATE TRIGGER ${trigger} BEFORE UPDATE ON ${t} FOR EACH ROW EXECUTE FUNCTION pgfence.enforce_fencing_token('${bareIdentifier(column)}');`,
    );
  }
  return statements.join('\n');
}

export interface VersionColumnOptions {
  /** Default 'version'. */
  column?: string;
}
const VERSION_COLUMN_OPTION_KEYS = optionKeys<VersionColumnOptions>({ column: true });

/**
 * The SQL that adds a version column (bigint NOT NULL DEFAULT 0) to one of your tables, for
 * versionedUpdate. Idempotent.
 *
 * @example
 * ```ts fragment
 * await pool.query(versionColumnSql('documents')); // ALTER TABLE "documents" ADD COLUMN IF NOT EXISTS "version" bigint NOT NULL DEFAULT 0;
 * ```
 */
export function versionColumnSql(table: string, opts?: VersionColumnOptions): string {
  const o = optionsObject<VersionColumnOptions>(opts, 'versionColumnSql options', VERSION_COLUMN_OPTION_KEYS);
  return `ALTER TABLE ${quoteTable(table)} ADD COLUMN IF NOT EXISTS ${quoteColumn(o.column ?? DEFAULT_VERSION_COLUMN, 'column')} bigint NOT NULL DEFAULT 0;`;
}

/*
 * The way back from fencingColumnSql / versionColumnSql, for migrators whose migrations have a down step
 * (TypeORM's down(), Knex's down): the SQL that removes what they added. Idempotent, like them.
 */

/**
 * Drops the enforcing trigger (if there is one) and the fencing column. The trigger goes too: it names
 * the column only as its argument, so dropping the column alone would leave a trigger running on every
 * UPDATE of the table, which would guard a column of that name added later.
 */
export function dropFencingColumnSql(table: string, opts?: { column?: string }): string {
  // The trigger's DROP as fencingColumnSql itself issues it before creating the trigger: its name has one definition.
  const dropTrigger = fencingColumnSql(table, { ...(opts?.column === undefined ? {} : { column: opts.column }), enforce: true })
    .split('\n')
    .find((statement) => statement.startsWith('DROP TRIGGER IF EXISTS '))!;
  return `${dropTrigger}\nALTER TABLE ${quoteTable(table)} DROP COLUMN IF EXISTS ${quoteColumn(opts?.column ?? DEFAULT_FENCING_COLUMN, 'column')};`;
}

/** Drops the version column. */
export function dropVersionColumnSql(table: string, opts?: { column?: string }): string {
  return `ALTER TABLE ${quoteTable(table)} DROP COLUMN IF EXISTS ${quoteColumn(opts?.column ?? DEFAULT_VERSION_COLUMN, 'column')};`;
}
