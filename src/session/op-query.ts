import type pg from 'pg';
import type { Connection } from 'pg';

/** A row as the server sent it: each column's text (or null), in the statement's column order. */
export type RawRow = (string | null)[];

/** What node-postgres's connection offers a submittable (the part of it OpQuery uses). */
interface Wire {
  stream: { cork?(): void; uncork?(): void };
  parsedStatements: Record<string, string>;
  /** pg >= 8.23 only: named statements sent, their ParseComplete not yet in. */
  submittedNamedStatements?: Record<string, string>;
  query(text: string): void;
  parse(msg: { name: string; text: string }): void;
  bind(msg: { statement: string; values: (string | null)[] }): void;
  execute(msg: { portal: string; rows?: number }): void;
  sync(): void;
  sendCopyFail(why: string): void;
}

/**
 * One lock-operation statement as a node-postgres submittable (client.query accepts any object with
 * `submit`): the session's hot path. pg's own Query builds a Result, looks up a type parser per column,
 * makes an object per row and settles a promise; a lock operation needs none of it. Its rows are
 * handed over as the server's text, by position, and `done` is called exactly once: after
 * ReadyForQuery, or with the error (server error, lost connection, or the client refusing the query).
 *
 * Prepared statements are parsed once per connection, through the same bookkeeping pg keeps for its
 * own named queries (parsedStatements), so the two may share a connection. No Describe is sent: the
 * columns' order is the statement's contract (see OpFlavour), and text is all the rows carry.
 */
export class OpQuery {
  /** Read by node-postgres: a named statement is recorded as parsed when ParseComplete arrives. */
  readonly name: string | undefined;
  readonly text: string;
  /** Set by node-postgres when a query_timeout applies: called when the query ends, it clears that timer. */
  callback: ((err: Error | null) => void) | undefined = undefined;
  private readonly rows: RawRow[] = [];
  private settled = false;

  constructor(
    statement: { name?: string; text: string },
    /** Bound parameters as text; null sends the text as a simple query (no Parse, ever). */
    private readonly values: (string | null)[] | null,
    private readonly done: (err: Error | null, rows: RawRow[]) => void,
  ) {
    this.name = statement.name;
    this.text = statement.text;
  }

  submit(connection: Connection): null {
    const wire = connection as unknown as Wire;
    if (this.values === null) {
      wire.query(this.text);
      return null;
    }
    // One write for Parse/Bind/Execute/Sync, as pg's Query does.
    wire.stream.cork?.();
    try {
      const name = this.name ?? '';
      if (!name || (wire.parsedStatements[name] === undefined && wire.submittedNamedStatements?.[name] === undefined)) {
        wire.parse({ name, text: this.text });
        if (name && wire.submittedNamedStatements) wire.submittedNamedStatements[name] = this.text;
      }
      wire.bind({ statement: name, values: this.values });
      wire.execute({ portal: '' });
      wire.sync();
    } finally {
      wire.stream.uncork?.();
    }
    return null;
  }

  handleDataRow(msg: { fields: RawRow }): void {
    this.rows.push(msg.fields);
  }

  handleReadyForQuery(): void {
    this.settle(null);
  }

  /** A server error (ReadyForQuery follows, for nobody), a lost connection, or a query the client refused. */
  handleError(err: Error): void {
    this.settle(err);
  }

  handleRowDescription(): void {}
  handleCommandComplete(): void {}
  handleEmptyQuery(): void {}
  handlePortalSuspended(): void {}
  handleCopyInResponse(connection: Connection): void {
    (connection as unknown as Wire).sendCopyFail('pgfence: a lock statement takes no COPY data');
  }
  handleCopyData(): void {}

  private settle(err: Error | null): void {
    if (this.settled) return;
    this.settled = true;
    this.callback?.(err);
    try {
      this.done(err, this.rows);
    } catch (thrown) {
      // Thrown by a caller's code (a listener, a logger) while pg parses the socket's messages: thrown again
      // outside the parser, as pg's own Query does, so that the connection's message stream stays intact.
      process.nextTick(() => {
        throw thrown;
      });
    }
  }
}

/** Type parsers that keep every value as the server's text (a pipelined client's rows, read like OpQuery's). */
const asText = { getTypeParser: () => (value: string) => value };

/**
 * Sends a lock statement on `client`: as an OpQuery, or, on a client in pg's pipeline mode (which refuses
 * any submittable but its own Query), as a Query whose rows are arrays of the server's text, read alike.
 */
export function sendOpQuery(
  client: pg.ClientBase,
  statement: { name?: string; text: string },
  values: (string | null)[] | null,
  done: (err: Error | null, rows: RawRow[]) => void,
): void {
  if ((client as { pipeline?: boolean }).pipeline !== true) {
    client.query(new OpQuery(statement, values, done));
    return;
  }
  const config = { ...statement, ...(values === null ? {} : { values }), rowMode: 'array' as const, types: asText };
  client.query(config).then(
    (res) => done(null, res.rows as RawRow[]),
    (err: Error) => done(err, []),
  );
}
