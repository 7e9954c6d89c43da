/**
 * The way back from fencingColumnSql / versionColumnSql, for migrators whose migrations have a down step
 * (TypeORM's down(), Knex's down): the SQL that removes what they added. Idempotent, like them.
 */
import { DEFAULT_FENCING_COLUMN, DEFAULT_VERSION_COLUMN, fencingColumnSql, quoteColumn, quoteTable } from '../../fencing/index.js';

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
