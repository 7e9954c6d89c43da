/** Large batches are split: a statement with many thousand array elements gains nothing more. */
const MAX_BATCH = 4096;

/** What assembling a batch needs to know of a queued operation. */
interface Queued {
  fenced: boolean;
  /** Set for a statement of its own: it goes alone. */
  statement?: unknown;
}

/**
 * The next statement's operations, taken from `pending`, and what stays queued: a statement of its own
 * goes alone; fenced and plain operations go in separate statements (a plain batch may make its commit
 * asynchronous for a NOTIFY; a token's commit must be durable).
 */
export function takeBatch<Op extends Queued>(pending: Op[]): [batch: Op[], rest: Op[]] {
  if (pending.length === 1) return [pending, []];
  if (pending[0]!.statement) return [[pending.shift()!], pending];
  const fenced = pending[0]!.fenced;
  const batch: Op[] = [];
  const rest: Op[] = [];
  for (const op of pending) {
    if (op.fenced === fenced && !op.statement && batch.length < MAX_BATCH) batch.push(op);
    else rest.push(op);
  }
  return [batch, rest];
}
