/**
 * Prisma wraps PostgreSQL's errors: a raw query that fails rejects with PrismaClientKnownRequestError
 * P2010, whose `meta.driverAdapterError.cause` is the driver adapter's mapped error ({ kind: 'postgres',
 * code, severity, ... } for most, or a named kind with `originalCode` for the SQLSTATEs Prisma knows).
 * pgfence's rules read a driver-level error (SQLSTATE `code`, `severity`: core/sqlstate.ts), so the
 * executor throws one of these, with Prisma's own error as its `cause`.
 */

/** A PostgreSQL error as pgfence reads it, rebuilt from what Prisma reported; `cause` is Prisma's error. */
export class PrismaDriverError extends Error {
  /** SQLSTATE, or a connection-exception class code (08xxx) for a connection Prisma saw fail. */
  readonly code: string | undefined;
  /** 'ERROR', 'FATAL', ...; absent when the connection failed rather than a statement. */
  readonly severity: string | undefined;
  readonly detail: string | undefined;
  readonly hint: string | undefined;

  constructor(fields: { message: string; code?: string; severity?: string; detail?: string; hint?: string }, cause: unknown) {
    super(fields.message, { cause });
    this.name = 'PrismaDriverError';
    this.code = fields.code;
    this.severity = fields.severity;
    this.detail = fields.detail;
    this.hint = fields.hint;
  }
}

/** The driver adapter's mapped error (driver-adapter-utils' MappedError), as far as pgfence reads it. */
interface MappedError {
  kind?: unknown;
  code?: unknown;
  severity?: unknown;
  message?: unknown;
  detail?: unknown;
  hint?: unknown;
  originalCode?: unknown;
  originalMessage?: unknown;
  cause?: unknown;
  reason?: unknown;
}

/**
 * Kinds that mean the connection failed, not a statement: no severity, so the core treats them as a
 * lost connection; the code is the SQLSTATE class PostgreSQL's clients use for them.
 */
const CONNECTION_KINDS: Readonly<Record<string, string>> = {
  ConnectionClosed: '08006',
  SocketTimeout: '08006',
  DatabaseNotReachable: '08001',
  TlsConnectionError: '08001',
};

/** SQLSTATEs the adapter maps to a named kind that PostgreSQL reports while connecting (severity FATAL). */
const FATAL_CODES = new Set(['3D000', '28000', '28P01', '53300']);

/** Prisma's code for an interactive transaction that is closed: timed out, committed, rolled back. */
const TRANSACTION_CLOSED = 'P2028';

/**
 * What the executor throws for an error of Prisma: the PostgreSQL error it wraps, rebuilt; a closed
 * transaction (P2028, or the adapter's TransactionAlreadyClosed) as SQLSTATE 25P02, since nothing runs
 * in it any more; anything else as it came (no severity: the core reads it as a failed connection).
 */
export function driverError(err: unknown): unknown {
  const mapped = mappedErrorOf(err);
  if (mapped) return fromMapped(mapped, err);
  if ((err as { code?: unknown } | null)?.code === TRANSACTION_CLOSED) return transactionClosed(err);
  return err;
}

function mappedErrorOf(err: unknown): MappedError | undefined {
  const adapterError = (err as { meta?: { driverAdapterError?: unknown } } | null)?.meta?.driverAdapterError ?? err;
  // DriverAdapterError: its `cause` is the mapped error (driver-adapter-utils' isDriverAdapterError).
  if ((adapterError as { name?: unknown } | null)?.name !== 'DriverAdapterError') return undefined;
  const cause = (adapterError as { cause?: unknown }).cause;
  return typeof cause === 'object' && cause !== null ? (cause as MappedError) : undefined;
}

function fromMapped(m: MappedError, prismaError: unknown): unknown {
  const text = (v: unknown) => (typeof v === 'string' ? v : undefined);
  if (m.kind === 'postgres') {
    return new PrismaDriverError(
      { message: text(m.message) ?? 'PostgreSQL error', code: text(m.code), severity: text(m.severity), detail: text(m.detail), hint: text(m.hint) },
      prismaError,
    );
  }
  const originalCode = text(m.originalCode);
  if (originalCode !== undefined) {
    // A named kind (TableDoesNotExist, ColumnNotFound, TransactionWriteConflict for 40001 and 40P01, ...):
    // the adapter keeps the SQLSTATE and PostgreSQL's message, but not the severity.
    return new PrismaDriverError(
      { message: text(m.originalMessage) ?? String(m.kind), code: originalCode, severity: FATAL_CODES.has(originalCode) ? 'FATAL' : 'ERROR' },
      prismaError,
    );
  }
  const kind = text(m.kind) ?? '';
  if (kind === 'TransactionAlreadyClosed') return transactionClosed(prismaError);
  const message = `${kind}${text(m.cause) ?? text(m.reason) ? `: ${text(m.cause) ?? text(m.reason)}` : ''}`;
  if (kind in CONNECTION_KINDS) return new PrismaDriverError({ message: `the connection failed (${message})`, code: CONNECTION_KINDS[kind] }, prismaError);
  // Not PostgreSQL's (a value Prisma could not read, ...): a statement error of its own.
  return new PrismaDriverError({ message: `Prisma: ${message}`, severity: 'ERROR' }, prismaError);
}

/**
 * Prisma has ended the interactive transaction (most often: its `timeout`, 5000 ms unless given to
 * $transaction, passed while a lock was awaited). Nothing runs in it any more, as after SQLSTATE 25P02.
 */
function transactionClosed(prismaError: unknown): PrismaDriverError {
  const said = prismaError instanceof Error ? prismaError.message.trim().split('\n').at(-1)!.trim() : String(prismaError);
  return new PrismaDriverError(
    {
      message:
        `Prisma closed this interactive transaction (${TRANSACTION_CLOSED}: ${said}); give prisma.$transaction() a timeout ` +
        'longer than the waits inside it, e.g. prisma.$transaction(fn, { timeout: 15_000 }), or a shorter timeoutMs to xactLock',
      code: '25P02',
      severity: 'ERROR',
    },
    prismaError,
  );
}
