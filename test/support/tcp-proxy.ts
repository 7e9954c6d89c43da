import { createConnection, createServer, type Server, type Socket } from 'node:net';

/**
 * A TCP proxy in front of PostgreSQL that can turn into a blackhole: connections stay open but no
 * byte crosses in either direction, as when a network path silently drops packets.
 */
export class TcpProxy {
  private server: Server | null = null;
  private readonly pairs = new Set<[Socket, Socket]>();
  private blackholed = false;
  /** Bytes from the server are held (holdReplies): requests still reach it. */
  private repliesHeld = false;
  /** A client that closes leaves its server session open (keepServerSessions). */
  private keepServerSide = false;
  /** Connections (by order of arrival) that go silent once their startup is answered (silenceAfterStartup). */
  private readonly silencedAfterStartup = new Set<number>();
  /** New connections end as they become ready (shutDownWhenReady). */
  private shutDownOnReady = false;
  /** While stalled (or replies are held): deliveries held for heal(), in order. */
  private held: (() => void)[] | null = null;
  port = 0;
  /** Every chunk forwarded towards the server / the client: which connection (in order of arrival) and when (performance.now()). */
  readonly toServer: { conn: number; at: number }[] = [];
  readonly toClient: { conn: number; at: number }[] = [];
  private connections = 0;

  constructor(
    private readonly targetHost: string,
    private readonly targetPort: number,
  ) {}

  async start(): Promise<this> {
    this.server = createServer((client) => {
      const upstream = createConnection({ host: this.targetHost, port: this.targetPort });
      const pair: [Socket, Socket] = [client, upstream];
      this.pairs.add(pair);
      const conn = this.connections++;
      const record = (into: { conn: number; at: number }[]) => () => void (this.blackholed || into.push({ conn, at: performance.now() }));
      client.on('data', record(this.toServer));
      upstream.on('data', record(this.toClient));
      // Silenced after startup: the startup answer (the first chunk from the server) crosses, nothing after it.
      let startedUp = false;
      const silenced = () => startedUp && this.silencedAfterStartup.has(conn);
      const forward = (from: Socket, to: Socket, reply: boolean) =>
        from.on('data', (chunk) => {
          if (silenced()) return;
          if (reply) startedUp = true;
          if (!this.blackholed && !(reply && this.repliesHeld)) to.write(chunk);
          else this.held?.push(() => to.write(chunk));
        });
      forward(client, upstream, false);
      if (this.shutDownOnReady) {
        // The startup answer ends with ReadyForQuery: the shutdown message follows it in the same chunk.
        upstream.once('data', (chunk) => {
          client.end(Buffer.concat([chunk, ADMIN_SHUTDOWN]));
          upstream.destroy();
        });
      } else forward(upstream, client, true);
      const end = () => {
        this.pairs.delete(pair);
        client.destroy();
        upstream.destroy();
      };
      // In a blackhole a closed side is not noticed by the other: the server keeps its session.
      client.on('close', () => !this.blackholed && !this.keepServerSide && end());
      upstream.on('close', () => !this.blackholed && end());
      client.on('error', () => {});
      upstream.on('error', () => {});
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.port = (this.server.address() as { port: number }).port;
    return this;
  }

  blackhole(): void {
    this.blackholed = true;
  }

  /**
   * Like blackhole(), but the bytes are held and delivered by heal(), as TCP delivers them once a
   * broken path comes back (a blackhole() loses them for good).
   */
  stall(): void {
    this.blackholed = true;
    this.held = [];
  }

  /**
   * Holds what the server sends until heal(), while what clients send still reaches it: a statement
   * runs (a lock is granted), its answer is on its way.
   */
  holdReplies(): void {
    this.repliesHeld = true;
    this.held ??= [];
  }

  /**
   * From now on a client that closes its connection leaves the server's end open until cutAll() or
   * close(): its session lives on, with whatever it still holds, for the test to look at.
   */
  keepServerSessions(): void {
    this.keepServerSide = true;
  }

  /** The `conn`th connection from now (0: the next) has its startup answered, then no byte crosses either way. */
  silenceAfterStartup(conn: number): void {
    this.silencedAfterStartup.add(this.connections + conn);
  }

  /**
   * From now on (until heal()) a new connection gets its startup answer and, read with it, the message of a
   * server shutting down (FATAL 57P01), then its end: the server went down just as the connection became ready.
   */
  shutDownWhenReady(): void {
    this.shutDownOnReady = true;
  }

  heal(): void {
    this.blackholed = false;
    this.shutDownOnReady = false;
    this.repliesHeld = false;
    for (const deliver of this.held?.splice(0) ?? []) deliver();
    this.held = null;
    if (this.keepServerSide) return;
    // A side that closed meanwhile is noticed now.
    for (const pair of [...this.pairs]) {
      if (pair[0].destroyed || pair[1].destroyed) {
        this.pairs.delete(pair);
        pair[0].destroy();
        pair[1].destroy();
      }
    }
  }

  /** How many deliveries a stall holds back now (something was sent into it). */
  get stalled(): number {
    return this.held?.length ?? 0;
  }

  /** Closes both sides of every connection (the server then ends the sessions behind them). */
  cutAll(): void {
    for (const [a, b] of this.pairs) {
      a.destroy();
      b.destroy();
    }
    this.pairs.clear();
  }

  async close(): Promise<void> {
    this.cutAll();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }
}

/** An ErrorResponse as a server shutting down sends it to every session (FATAL 57P01). */
const ADMIN_SHUTDOWN = (() => {
  const fields = Buffer.from('SFATAL\0VFATAL\0C57P01\0Mterminating connection due to administrator command\0\0');
  const head = Buffer.alloc(5);
  head.write('E', 0);
  head.writeInt32BE(fields.length + 4, 1);
  return Buffer.concat([head, fields]);
})();

/** A proxy in front of the server of `url`, and `url` through it. */
export async function proxyTo(url: string): Promise<{ proxy: TcpProxy; url: string }> {
  const target = new URL(url);
  const proxy = await new TcpProxy(target.hostname, Number(target.port || 5432)).start();
  const via = new URL(url);
  via.port = String(proxy.port);
  return { proxy, url: via.toString() };
}
