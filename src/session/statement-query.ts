/** A statement's text, or a prepared statement (name and text), possibly per flavour (guarded or not). */
export type StatementText = string | PreparedText | ((guarded: boolean) => string | PreparedText);
type PreparedText = { name: string; text: string };

/** A statement of its own as a query: its text, or its prepared statement, in the session's flavour. */
export function statementQuery(
  statement: { text: StatementText; values: unknown[] },
  guarded: boolean,
): { name?: string; text: string; values: unknown[] } {
  const text = typeof statement.text === 'function' ? statement.text(guarded) : statement.text;
  return typeof text === 'string' ? { text, values: statement.values } : { ...text, values: statement.values };
}
