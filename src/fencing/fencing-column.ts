import { booleanOption, optionKeys, optionsObject } from '../options.js';
import { bareIdentifier, DEFAULT_FENCING_COLUMN, quoteColumn, quoteTable } from './identifiers.js';

export interface FencingColumnOptions {
  /** Default 'fencing_token'. */
  column?: string;
  /**
   * Also install a trigger (pgfence.enforce_fencing_token, from sql/: run migrate() first) that makes
   * the table refuse an UPDATE lowering the token, whoever writes.
   */
  enforce?: boolean;
}
export const FENCING_COLUMN_OPTION_KEYS = optionKeys<FencingColumnOptions>({ column: true, enforce: true });

/** The SQL that adds a fencing column (bigint, NULL until first fenced write) to one of your tables. Idempotent. */
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
