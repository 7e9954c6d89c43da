/**
 * A small TCP proxy in front of the database that counts what clients send: PostgreSQL protocol
 * messages by type (Parse 'P', Bind 'B', Execute 'E', Sync 'S', simple Query 'Q', ...) and round
 * trips. It sees every client alike (pgfence's sessions, bare pg, postgres.js) without touching any.
 * A round trip is counted when a connection sends after the server has spoken to it (or first
 * sends at all): the pipelined messages of one flight count once. Used for counting only: the
 * proxy's own hop would skew timings.
 */

import net from 'node:net';

export interface WireCounts {
  roundTrips: number;
  messages: number;
  byType: Record<string, number>;
  connections: number;
}

const SSL_REQUEST = 80877103;
const GSSENC_REQUEST = 80877104;

export class WireProxy {
  private server: net.Server | null = null;
  private sockets = new Set<net.Socket>();
  private counts: WireCounts = empty();
  /** Counting is on between start() and take(); connections opened before still count. */
  private counting = false;

  private constructor(
    private readonly host: string,
    private readonly port: number,
  ) {}

  /** A proxy for `url`'s host and port, or null when `url` is no single-host URL. */
  static async open(url: string): Promise<{ proxy: WireProxy; url: string } | null> {
    let u: URL;
    try {
      u = new URL(url);
    } catch {
      return null;
    }
    if (u.hostname === '' || u.host.includes(',')) return null;
    const proxy = new WireProxy(u.hostname.replace(/^\[|\]$/g, ''), Number(u.port || 5432));
    const port = await proxy.listen();
    u.hostname = '127.0.0.1';
    u.port = String(port);
    return { proxy, url: u.toString() };
  }

  private listen(): Promise<number> {
    const server = net.createServer((client) => this.relay(client));
    this.server = server;
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve((server.address() as net.AddressInfo).port));
    });
  }

  private relay(client: net.Socket): void {
    const upstream = net.connect(this.port, this.host);
    this.sockets.add(client).add(upstream);
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    let pending: Buffer = Buffer.alloc(0);
    let untyped = true; // the startup packet (and SSL/GSS requests) carry no type byte
    let serverSpoke = true;
    if (this.counting) this.counts.connections++;
    client.on('data', (chunk: Buffer) => {
      upstream.write(chunk);
      if (this.counting && serverSpoke) this.counts.roundTrips++;
      serverSpoke = false;
      // Parsed also while not counting, so that message boundaries are known when counting starts.
      pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
      for (;;) {
        if (untyped) {
          if (pending.length < 8) break;
          const len = pending.readInt32BE(0);
          if (pending.length < len) break;
          const code = pending.readInt32BE(4);
          untyped = code === SSL_REQUEST || code === GSSENC_REQUEST;
          pending = pending.subarray(len);
          this.count('startup');
        } else {
          if (pending.length < 5) break;
          const total = 1 + pending.readInt32BE(1);
          if (pending.length < total) break;
          this.count(String.fromCharCode(pending[0]!));
          pending = pending.subarray(total);
        }
      }
    });
    upstream.on('data', (chunk: Buffer) => {
      serverSpoke = true;
      client.write(chunk);
    });
    const close = () => {
      client.destroy();
      upstream.destroy();
      this.sockets.delete(client);
      this.sockets.delete(upstream);
    };
    client.on('error', close).on('close', close);
    upstream.on('error', close).on('close', close);
  }

  private count(type: string): void {
    if (!this.counting) return;
    this.counts.messages++;
    this.counts.byType[type] = (this.counts.byType[type] ?? 0) + 1;
  }

  start(): void {
    this.counts = empty();
    this.counting = true;
  }

  take(): WireCounts {
    this.counting = false;
    return this.counts;
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((r) => (this.server ? this.server.close(() => r()) : r()));
  }
}

function empty(): WireCounts {
  return { roundTrips: 0, messages: 0, byType: {}, connections: 0 };
}
