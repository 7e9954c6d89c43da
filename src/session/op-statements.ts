/**
 * What a session runs, given to it by its owner: the session batches, sends, probes and reconciles
 * whatever statement set it is handed, and knows nothing of what the operations mean.
 */

/** A prepared statement: one name, one text. */
export interface Prepared {
  name: string;
  text: string;
}

/**
 * The statements of one flavour (see OpStatements.setup). Op codes are positive integers (0 is the
 * session's own probe); every row answers `r`, the operation's result code. The session reads rows by
 * column position (OpQuery), so the columns come in the order given: single (r[, token]), batch (i, r[, token]).
 */
export interface OpFlavour {
  /** A lone operation, one prepared statement per op code: $1 is the key. */
  single: Readonly<Record<number, Prepared>>;
  /** Many operations in one statement, evaluated in array order: $1 op codes, $2 keys; rows (i, r), i from 1. */
  batch: Prepared;
  /** As `single`, with a `token` column (text or NULL); only some op codes have one (the rest go as a fenced batch). */
  fencedSingle: Readonly<Partial<Record<number, Prepared>>>;
  /** As `batch`, with a `token` column. */
  fencedBatch: Prepared;
}

export interface OpStatements {
  /**
   * Sent first on every new session, and again every keepaliveMs while it answered guarded = false (in
   * place of a keepalive probe): its one row's `guarded` picks the flavour of the session's statements.
   */
  setup: Prepared;
  plain: OpFlavour;
  guarded: OpFlavour;
  /** After a statement failed on a live connection: what the session holds now (any rows). */
  held: string;
  /** The operations that put `ops` back to "not done", given the rows of `held`: $1 and $2 of `undo`. */
  undoFor(ops: readonly { code: number; key: bigint }[], held: readonly unknown[]): { codes: number[]; keys: bigint[] };
  /** Runs the undo operations in one statement ($1 op codes, $2 keys). */
  undo: string;
}
