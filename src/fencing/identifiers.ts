import { describeType, InvalidArgumentError } from '../core/index.js';

/** The fencing column of a guarded table unless the caller names another. */
export const DEFAULT_FENCING_COLUMN = 'fencing_token';

/** Plain SQL identifiers only: anything else (quotes, spaces, semicolons) is refused, never escaped. */
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_$]*$/;
const MAX_IDENTIFIER_BYTES = 63;

/** A column name, validated and double-quoted (case is kept, as Kysely does). */
export function quoteColumn(value: unknown, argument: string): string {
  return quoteIdentifier(value, argument);
}

/** A table name, `table` or `schema.table`, validated and quoted part by part. */
export function quoteTable(value: unknown, argument = 'table'): string {
  if (typeof value !== 'string') throw new InvalidArgumentError(argument, `expected a table name, got ${describeType(value)}`);
  const parts = value.split('.');
  if (parts.length > 2) throw new InvalidArgumentError(argument, `expected "table" or "schema.table", got "${value.slice(0, 80)}"`);
  return parts.map((p) => quoteIdentifier(p, argument)).join('.');
}

function quoteIdentifier(value: unknown, argument: string): string {
  if (typeof value !== 'string') throw new InvalidArgumentError(argument, `expected an identifier, got ${describeType(value)}`);
  if (!IDENTIFIER.test(value) || Buffer.byteLength(value) > MAX_IDENTIFIER_BYTES) {
    throw new InvalidArgumentError(
      argument,
      `"${value.slice(0, 80)}" is not a plain SQL identifier (letters, digits, _ and $, not starting with a digit, at most 63 bytes)`,
    );
  }
  return `"${value}"`;
}

/** The unquoted form of a validated identifier, for use inside a string literal or a derived name. */
export function bareIdentifier(quoted: string): string {
  return quoted.replace(/"/g, '');
}
