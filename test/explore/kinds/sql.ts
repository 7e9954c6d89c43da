/**
 * The public SQL interface from plain connections, as a client in another language would use it:
 * fenced session locks (try_lock_fenced / lock_fenced / unlock), leases (try_lease / lease /
 * renew_lease / release_lease) and fenced transaction locks (try_xact_lock_fenced / xact_lock_fenced).
 * Keys come from pgfence.lock_key in SQL. Every error here is the driver's (no PgfenceError in SQL).
 */
import pg from 'pg';
import { now } from '../history.js';
import { type AcquireRequest, driver, LEASE_SCOPED, SESSION_SCOPED, statementGuardMs, type KindAdapter, type KindContext, type KindHold, LossNotice, rawClientConfig, Serial, transactionHold } from './kind.js';

/**
 * The actor's one connection, opened again after it broke; its statements one at a time, each bounded
 * client-side as a careful client bounds them (the wait it asked for plus the detection bound). A hold
 * is bound to the client it was granted on: once that one broke, its statements fail (a new
 * connection holds nothing of the old one's).
 */
class Connection {
  private client: pg.Client | null = null;
  private inFlight = 0;
  readonly serial = new Serial();
  /** Told when the current client breaks (its session, and what it held, is gone). */
  onBroken: (() => void) | null = null;

  constructor(
    private readonly url: string,
    private readonly boundMs: number,
  ) {}

  async get(): Promise<pg.Client> {
    if (this.client) return this.client;
    const client = new pg.Client(rawClientConfig(this.url, this.boundMs));
    client.on('error', () => this.break(client));
    client.on('end', () => this.break(client));
    await driver(() => client.connect());
    this.client = client;
    return client;
  }

  private break(client: pg.Client): void {
    if (this.client !== client) return;
    this.client = null;
    client.end().catch(() => {});
    this.onBroken?.();
  }

  /** A statement on the current connection (a new one when it broke). */
  async query<R extends pg.QueryResultRow>(text: string, values: unknown[] = [], waitMs = 0): Promise<R[]> {
    return this.on<R>(await this.get(), text, values, waitMs);
  }

  /** A statement on `client` only: fails when that one broke. */
  on<R extends pg.QueryResultRow>(client: pg.Client, text: string, values: unknown[] = [], waitMs = 0): Promise<R[]> {
    return driver(async () => {
      if (this.client !== client) throw new Error('explore: the connection of this hold broke');
      this.inFlight++;
      try {
        // query_timeout per query: node-postgres reads it from the query config (its types leave it out).
        const config = { text, values, query_timeout: waitMs + this.boundMs } as pg.QueryConfig;
        return (await client.query<R>(config)).rows;
      } catch (err) {
        // Unanswered: node-postgres keeps waiting for that answer before any other, so the connection is done.
        if ((err as { code?: unknown }).code === undefined) this.break(client);
        throw err;
      } finally {
        this.inFlight--;
      }
    });
  }

  /** Ends the connection; a statement still running is cancelled first (its backend would go on waiting). */
  async close(): Promise<void> {
    const client = this.client;
    this.client = null;
    if (!client) return;
    if (this.inFlight > 0) {
      const side = new pg.Client(rawClientConfig(this.url, this.boundMs));
      await side
        .connect()
        .then(() => side.query('SELECT pg_cancel_backend($1)', [(client as unknown as { processID: number }).processID]))
        .catch(() => {})
        .finally(() => side.end().catch(() => {}));
    }
    await client.end().catch(() => {});
  }
}

/**
 * open() of a kind that talks SQL on a connection of its own: `take` asks for one lock on the current
 * client. A lease outlives its connection, so a lease client releases what it holds when it closes.
 */
function sqlKind(
  take: (conn: Connection, client: pg.Client, request: AcquireRequest, ctx: KindContext) => Promise<KindHold | null>,
  opts: { releaseOnClose?: boolean } = {},
): KindAdapter['open'] {
  return async (ctx) => {
    const conn = new Connection(ctx.url, statementGuardMs(ctx.keepaliveMs));
    let current: { hold: KindHold; name: string } | null = null;
    return {
      acquire: (request) =>
        conn.serial.run(async () => {
          request.started();
          const hold = await take(conn, await conn.get(), request, ctx);
          current = hold && { hold, name: request.name };
          return hold;
        }),
      close: async () => {
        await conn.close();
        if (!opts.releaseOnClose) return;
        // An acquire under way when the close began may still be granted (its answer can beat the cancel):
        // let it land first, so that what it took is released too (else it lingers until its TTL: a leak).
        await conn.serial.run(async () => {});
        const last = current;
        if (!last) return;
        // Its own release (which stops its renewals), then by token in case a release under way was cancelled.
        await last.hold.release().catch(() => {});
        await conn.query('SELECT pgfence.release_lease(pgfence.lock_key($1), $2)', [last.name, String(last.hold.token)]).catch(() => {});
        await conn.close();
      },
    };
  };
}

const token = (v: string | null): bigint | null => (v === null ? null : BigInt(v));
const isState = (err: unknown, code: string) => (err as { code?: unknown } | null)?.code === code;

/**
 * A token from one try (`trySql`), or from a wait bounded by a timeout setting (`waitSql`, SQLSTATE
 * `timedOut` when it ran out): null when busy or timed out. lock_timeout is set for the transaction
 * only; statement_timeout for the session, and reset after.
 */
async function tokenOf(
  conn: Connection,
  client: pg.Client,
  name: string,
  timeoutMs: number | null,
  how: { trySql: string; waitSql: string; setting: 'statement_timeout' | 'lock_timeout'; timedOut: string },
): Promise<bigint | null> {
  if (timeoutMs === null) return token((await conn.on<{ t: string | null }>(client, how.trySql, [name]))[0]!.t);
  const local = how.setting === 'lock_timeout';
  await conn.on(client, 'SELECT set_config($1, $2, $3)', [how.setting, String(Math.max(1, timeoutMs)), local]);
  try {
    return token((await conn.on<{ t: string }>(client, how.waitSql, [name], timeoutMs))[0]!.t);
  } catch (err) {
    if (!isState(err, how.timedOut)) throw err;
    return null;
  } finally {
    if (!local) await conn.on(client, `SELECT set_config($1, '0', false)`, [how.setting]).catch(() => {});
  }
}

export const sqlLock: KindAdapter = {
  kind: 'sql-lock',
  turn: 'kept',
  family: 'session',
  modes: ['exclusive'],
  supports: { try: true, abort: false, renew: false },
  tokens: true,
  ...SESSION_SCOPED,
  closeEndsConnection: true,
  open: sqlKind(async (conn, client, { name, timeoutMs }) => {
    // As the interface documents: bound the wait with statement_timeout (a session setting, reset after).
    const got = await tokenOf(conn, client, name, timeoutMs, {
      trySql: 'SELECT pgfence.try_lock_fenced(pgfence.lock_key($1))::text AS t',
      waitSql: 'SELECT pgfence.lock_fenced(pgfence.lock_key($1))::text AS t',
      setting: 'statement_timeout',
      timedOut: '57014',
    });
    if (got === null) return null;
    const notice = new LossNotice();
    conn.onBroken = () => notice.fire('session-lost');
    let released = false;
    const hold: KindHold = {
      token: got,
      tokenDurable: true,
      // The session answered: it still holds its session locks.
      believe: () =>
        conn.serial.run(async () => {
          if (released || notice.lost) return false;
          try {
            await conn.on(client, 'SELECT 1');
            return !notice.lost;
          } catch {
            return false;
          }
        }),
      onLost: (listener) => notice.on(listener),
      release: () =>
        conn.serial.run(async () => {
          released = true;
          if (notice.lost) return { released: false };
          try {
            const rows = await conn.on<{ ok: boolean }>(client, 'SELECT pgfence.unlock(pgfence.lock_key($1)) AS ok', [name]);
            return { released: rows[0]!.ok };
          } catch {
            return { released: false };
          }
        }),
    };
    return hold;
  }),
};

/** How much earlier than the database's expiry an SQL lease holder stops trusting its lease. */
const leaseMarginMs = (ttlMs: number) => Math.max(50, ttlMs * 0.1);

function sqlLeaseHold(conn: Connection, ctx: KindContext, name: string, leaseToken: bigint, sentAt: number): KindHold {
  const notice = new LossNotice();
  let deadline = sentAt + ctx.leaseTtlMs - leaseMarginMs(ctx.leaseTtlMs);
  let ended = false;
  let timer: NodeJS.Timeout | null = null;
  const stop = () => {
    ended = true;
    if (timer) clearTimeout(timer);
  };
  const lose = (reason: string) => {
    stop();
    notice.fire(reason);
  };
  const believe = () => {
    if (!ended && now() >= deadline) lose('lease-expired');
    return !ended;
  };
  const renew = () =>
    conn.serial.run(async () => {
      if (!believe()) return false;
      const sent = now();
      const rows = await conn.query<{ e: Date | null }>('SELECT pgfence.renew_lease(pgfence.lock_key($1), $2, $3) AS e', [name, String(leaseToken), ctx.leaseTtlMs]);
      if (rows[0]!.e === null) {
        lose('lease-lost');
        return false;
      }
      if (!ended) deadline = sent + ctx.leaseTtlMs - leaseMarginMs(ctx.leaseTtlMs);
      return !ended;
    });
  // A well-behaved client renews a third of the way into its TTL; the deadline still bounds it.
  const schedule = () => {
    timer = setTimeout(() => {
      if (!believe()) return;
      renew().then(
        () => !ended && schedule(),
        () => !ended && schedule(),
      );
    }, ctx.leaseTtlMs / 3);
  };
  schedule();
  return {
    token: leaseToken,
    tokenDurable: true,
    believe,
    onLost: (listener) => notice.on(listener),
    renew,
    release: () =>
      conn.serial.run(async () => {
        // Lost on its own deadline: nothing to give back (the row runs out by itself), as the Node API answers.
        if (!believe()) return { released: false };
        stop();
        const rows = await conn.query<{ ok: boolean }>('SELECT pgfence.release_lease(pgfence.lock_key($1), $2) AS ok', [name, String(leaseToken)]);
        return { released: rows[0]!.ok };
      }),
  };
}

export const sqlLease: KindAdapter = {
  kind: 'sql-lease',
  turn: 'kept',
  family: 'lease',
  modes: ['exclusive'],
  supports: { try: true, abort: false, renew: true },
  tokens: true,
  ...LEASE_SCOPED,
  closeEndsConnection: true,
  open: sqlKind(async (conn, _client, { name, timeoutMs }, ctx) => {
    const sent = now();
    if (timeoutMs === null) {
      const rows = await conn.query<{ granted: boolean; t: string }>('SELECT granted, token::text AS t FROM pgfence.try_lease(pgfence.lock_key($1), $2, $3, $1)', [
        name,
        ctx.leaseTtlMs,
        ctx.owner,
      ]);
      return rows[0]!.granted ? sqlLeaseHold(conn, ctx, name, BigInt(rows[0]!.t), sent) : null;
    }
    const rows = await conn.query<{ t: string | null }>('SELECT pgfence.lease(pgfence.lock_key($1), $2, $3, $4, $1)::text AS t', [name, ctx.leaseTtlMs, timeoutMs, ctx.owner], timeoutMs);
    const got = token(rows[0]!.t);
    if (got === null) return null;
    // The wait may have taken most of the TTL: renew at once, so the deadline counts from a known send.
    const renewedAt = now();
    const renewed = await conn.query<{ e: Date | null }>('SELECT pgfence.renew_lease(pgfence.lock_key($1), $2, $3) AS e', [name, String(got), ctx.leaseTtlMs]);
    return sqlLeaseHold(conn, ctx, name, got, renewed[0]!.e === null ? -Infinity : renewedAt);
  }, { releaseOnClose: true }),
};

export const sqlXact: KindAdapter = {
  kind: 'sql-xact',
  turn: 'kept',
  family: 'xact',
  modes: ['exclusive'],
  supports: { try: true, abort: false, renew: false },
  tokens: true,
  ...SESSION_SCOPED,
  closeEndsConnection: true,
  open: sqlKind(async (conn, client, { name, timeoutMs }) => {
    await conn.on(client, 'BEGIN');
    try {
      // Bounded with SET LOCAL lock_timeout, as the interface documents.
      const got = await tokenOf(conn, client, name, timeoutMs, {
        trySql: 'SELECT pgfence.try_xact_lock_fenced(pgfence.lock_key($1))::text AS t',
        waitSql: 'SELECT pgfence.xact_lock_fenced(pgfence.lock_key($1))::text AS t',
        setting: 'lock_timeout',
        timedOut: '55P03',
      });
      if (got === null) {
        await conn.on(client, 'ROLLBACK');
        return null;
      }
      return transactionHold(got, {
        ping: () => conn.on(client, 'SELECT 1'),
        commit: () => conn.on(client, 'COMMIT'),
        rollback: () => conn.on(client, 'ROLLBACK'),
        write: (write) => write({ pg: client }),
      });
    } catch (err) {
      await conn.on(client, 'ROLLBACK').catch(() => {});
      throw err;
    }
  }),
};
