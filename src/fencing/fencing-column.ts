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
