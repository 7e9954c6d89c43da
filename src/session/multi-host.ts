/**
 * Multi-host connection strings, as libpq reads them (node-postgres takes one host):
 * `postgresql://h1:5432,h2:5433/db?target_session_attrs=read-write`. A new connection tries the
 * hosts in order and keeps the first that fits; the host that fitted last is tried first next time.
 * Unlike libpq, no target_session_attrs lets a connection stay on a standby (pg_is_in_recovery()):
 * advisory locks taken there would be the standby's own, and it cannot issue tokens. So 'any' and
 * 'primary' take the first host not in recovery, 'read-write' also skips a read-only primary.
 */
import pg from 'pg';
import { connectionConfig, connectionTargets, type ConnectionTargets, type HostPort, type TargetSessionAttrs } from './connection-config.js';
import { hostRoleSql } from './session-sql.js';

/** A connection reached a host that does not fit (a standby, or a host that went away): try again. */
class WrongHostError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'WrongHostError';
  }
}

/** The base URL pointed at one host (its other settings kept). */
function urlFor(baseUrl: string, host: HostPort): string {
  const u = new URL(baseUrl);
  u.hostname = host.host.includes(':') ? `[${host.host}]` : host.host;
  u.port = host.port !== undefined ? String(host.port) : '';
  return u.toString();
}

const describe = (h: HostPort) => `${h.host}${h.port !== undefined ? `:${h.port}` : ''}`;

/** What a connection is: a standby, read-only. One round trip. */
async function roleOf(client: pg.ClientBase): Promise<{ standby: boolean; readOnly: boolean }> {
  const { rows } = await client.query<{ standby: boolean; ro: string }>(hostRoleSql);
  return { standby: rows[0]!.standby, readOnly: rows[0]!.ro === 'on' };
}

function fits(role: { standby: boolean; readOnly: boolean }, attrs: TargetSessionAttrs): boolean {
  if (role.standby) return false; // never for locks, whatever the attrs
  return attrs !== 'read-write' || !role.readOnly;
}

/** Picks the host for the next connection: the last that fitted, else the first that fits, in order. */
class HostSelector {
  private preferred: HostPort | null = null;

  constructor(
    readonly targets: ConnectionTargets,
    private readonly clientConfig: pg.ClientConfig,
  ) {}

  async choose(): Promise<HostPort> {
    if (this.preferred) return this.preferred;
    const failures: string[] = [];
    for (const host of this.targets.hosts) {
      const probe = new pg.Client({ ...this.clientConfig, connectionString: urlFor(this.targets.baseUrl, host) });
      probe.on('error', () => {});
      try {
        await probe.connect();
        const role = await roleOf(probe);
        if (fits(role, this.targets.targetSessionAttrs)) {
          this.preferred = host;
          return host;
        }
        failures.push(`${describe(host)}: ${role.standby ? 'a standby' : 'read-only'}`);
      } catch (err) {
        failures.push(`${describe(host)}: ${(err as Error).message}`);
      } finally {
        probe.end().catch(() => {}); // a probe: nothing of it is kept, whether or not it ends cleanly
      }
    }
    throw new WrongHostError(`pgfence: no host fits target_session_attrs=${this.targets.targetSessionAttrs} (${failures.join('; ')})`);
  }

  forget(host: HostPort): void {
    if (this.preferred === host) this.preferred = null;
  }
}

/** A pg.Client that connects to the host the selector picks and refuses a standby. */
function targetedClient(selector: HostSelector): typeof pg.Client {
  return class TargetedClient extends pg.Client {
    override connect(): Promise<pg.Client>;
    override connect(callback: (err: Error) => void): void;
    override connect(callback?: (err: Error) => void): Promise<pg.Client> | void {
      const done = this.connectToTarget();
      if (!callback) return done;
      done.then(() => callback(undefined as unknown as Error), callback);
    }

    private async connectToTarget(): Promise<pg.Client> {
      const host = await selector.choose();
      const self = this as unknown as { host: string; port: number; connectionParameters: { host: string; port: number } };
      self.host = self.connectionParameters.host = host.host;
      self.port = self.connectionParameters.port = host.port ?? (Number(process.env.PGPORT) || 5432);
      try {
        await super.connect();
      } catch (err) {
        selector.forget(host);
        throw new WrongHostError(`pgfence: cannot connect to ${describe(host)}: ${(err as Error).message}`, { cause: err });
      }
      const role = await roleOf(this).catch((err: unknown) => {
        selector.forget(host);
        this.end().catch(() => {}); // the host failed: the error thrown says so; ending it is tidying up
        throw new WrongHostError(`pgfence: ${describe(host)} failed: ${(err as Error).message}`, { cause: err });
      });
      if (!fits(role, selector.targets.targetSessionAttrs)) {
        selector.forget(host);
        await this.end().catch(() => {}); // as above
        throw new WrongHostError(`pgfence: ${describe(host)} is ${role.standby ? 'a standby' : 'read-only'} now`);
      }
      return this;
    }
  };
}

/**
 * A pg.Pool over the targets: each new connection goes to the host that fits; a connection that
 * reaches a host that no longer fits is retried on the next (once per host, then the error).
 */
function targetedPool(targets: ConnectionTargets, config: pg.PoolConfig): pg.Pool {
  const selector = new HostSelector(targets, { ...config, connectionString: targets.baseUrl });
  const Client = targetedClient(selector);
  class TargetedPool extends pg.Pool {
    override connect(): Promise<pg.PoolClient>;
    override connect(callback: (err: Error | undefined, client: pg.PoolClient | undefined, done: (release?: boolean | Error) => void) => void): void;
    override connect(
      callback?: (err: Error | undefined, client: pg.PoolClient | undefined, done: (release?: boolean | Error) => void) => void,
    ): Promise<pg.PoolClient> | void {
      const attempt = async (): Promise<pg.PoolClient> => {
        for (let i = 0; ; i++) {
          try {
            return await super.connect();
          } catch (err) {
            if (!(err instanceof WrongHostError) || i >= targets.hosts.length) throw err;
          }
        }
      };
      const done = attempt();
      if (!callback) return done;
      done.then(
        (client) => callback(undefined, client, client.release),
        (err: Error) => callback(err, undefined, () => {}),
      );
    }
  }
  return new TargetedPool({ ...config, connectionString: targets.baseUrl, Client });
}

/**
 * The pool for a connection string (URL, keyword/value settings or the PG* environment): a plain
 * pg.Pool for one host, a targeted pool for several hosts or a target_session_attrs.
 */
export function openPool(connectionString: string | undefined, config: pg.PoolConfig): pg.Pool {
  const targets = connectionTargets(connectionString);
  if (targets) return targetedPool(targets, config);
  return new pg.Pool({ ...connectionConfig(connectionString), ...config });
}

/** One client for a connection string: to the first host that fits when it names several. */
export function openClient(connectionString: string | undefined, config: pg.ClientConfig): pg.Client {
  const targets = connectionTargets(connectionString);
  if (!targets) return new pg.Client({ ...connectionConfig(connectionString), ...config });
  const Client = targetedClient(new HostSelector(targets, { ...config, connectionString: targets.baseUrl }));
  return new Client({ ...config, connectionString: targets.baseUrl });
}
