import { createConnection, createServer, type Server, type Socket } from 'node:net';

/**
 * A TCP proxy in front of PostgreSQL that can turn into a blackhole: connections stay open but no
 * byte crosses in either direction, as when a network path silently drops packets.
 */
export class TcpProxy {
  private server: Server | null = null;
  private readonly pairs = new Set<[Socket, Socket]>();
  private blackholed = false;
  /** While stalled: deliveries held for heal(), in order. */
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
      const forward = (from: Socket, to: Socket) =>
        from.on('data', (chunk) => {
          if (!this.blackholed) to.write(chunk);
          else this.held?.push(() => to.write(chunk));
        });
      forward(client, upstream);
      forward(upstream, client);
      const end = () => {
        this.pairs.delete(pair);
        client.destroy();
        upstream.destroy();
      };
      // In a blackhole a closed side is not noticed by the other: the server keeps its session.
      client.on('close', () => !this.blackholed && end());
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

  heal(): void {
    this.blackholed = false;
    for (const deliver of this.held?.splice(0) ?? []) deliver();
    this.held = null;
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
