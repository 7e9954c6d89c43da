// Connection strings as libpq reads them: URLs, keyword/value settings, the PG* environment.
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { beforeAll, describe, expect, it } from 'vitest';
import { createLocker, InvalidArgumentError, migrate } from '../src/index.js';
import { connectionTargets, parseKeywordValue, resolveConnectionString } from '../src/session/connection-config.js';
import { freePort } from './support/server.js';
import { track, useMigratedDatabase } from './support/db.js';

let db: Awaited<ReturnType<typeof useMigratedDatabase>>;

beforeAll(async () => {
  db = await useMigratedDatabase('conncfg');
});

/** The test database as keyword/value settings, the password quoted with libpq's escapes. */
function settingsFor(url: string, extra = ''): string {
  const u = new URL(url);
  const quote = (v: string) => `'${v.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
  return [
    `host=${u.hostname}`,
    `port=${u.port || '5432'}`,
    `user=${quote(decodeURIComponent(u.username))}`,
    u.password ? `password=${quote(decodeURIComponent(u.password))}` : '',
    `dbname=${quote(u.pathname.slice(1))}`,
    extra,
  ].join(' ');
}

describe('keyword/value settings', () => {
  it("reads libpq's syntax: spaces around =, quoted values with \\' and \\\\, bare values with \\ escapes", () => {
    const s = parseKeywordValue(`host = db.example  port=6543 user='o\\'brien' password='a b\\\\c' dbname=my\\ db application_name=''`);
    expect(Object.fromEntries(s)).toEqual({ host: 'db.example', port: '6543', user: "o'brien", password: 'a b\\c', dbname: 'my db', application_name: '' });
  });

  it('turns into one URL that node-postgres reads the same way', () => {
    const url = resolveConnectionString(`host=db.example port=6543 user='o\\'brien' password='p@ss:/w' dbname='my db' sslmode=disable`, {});
    const u = new URL(url);
    expect(u.hostname).toBe('db.example');
    expect(u.port).toBe('6543');
    expect(decodeURIComponent(u.username)).toBe("o'brien");
    expect(decodeURIComponent(u.password)).toBe('p@ss:/w');
    expect(decodeURIComponent(u.pathname)).toBe('/my db');
    expect(u.searchParams.get('sslmode')).toBe('disable');
    // A socket directory goes in ?host=, IPv6 in brackets, a user without a host in the query.
    expect(new URL(resolveConnectionString('host=/var/run/postgresql dbname=app', {})).searchParams.get('host')).toBe('/var/run/postgresql');
    expect(new URL(resolveConnectionString('host=::1 dbname=app', {})).hostname).toBe('[::1]');
    expect(new URL(resolveConnectionString('user=me dbname=app', {})).searchParams.get('user')).toBe('me');
  });

  it('refuses mistakes before any I/O, naming them', () => {
    const bad: [string, RegExp][] = [
      ['host=db prot=5432', /unknown connection setting "prot"/],
      ["host='db", /unterminated quoted value of "host"/],
      ['host db', /missing "=" after "host"/],
      ['host=db port=54x2', /invalid port "54x2"/],
      ['host=db service=x', /"service" is a libpq setting that node-postgres does not support/],
      ['postgres://[bad', /not a valid URL/],
    ];
    for (const [text, message] of bad) {
      expect(() => resolveConnectionString(text, {}), text).toThrow(InvalidArgumentError);
      expect(() => resolveConnectionString(text, {}), text).toThrow(message);
      expect(() => createLocker({ connectionString: text }), text).toThrow(message);
    }
  });

  it('without a string, the URL comes from PGHOST, PGPORT, PGUSER, PGPASSWORD and PGDATABASE', () => {
    const url = resolveConnectionString(undefined, { PGHOST: 'h', PGPORT: '7', PGUSER: 'u', PGPASSWORD: 'p w', PGDATABASE: 'd' });
    expect(url).toBe('postgresql://u:p%20w@h:7/d');
  });

  it('createLocker and migrate() connect with keyword/value settings', async () => {
    const settings = settingsFor(db.url, "application_name='pgfence kv'");
    await expect(migrate({ connectionString: settings })).resolves.toEqual({ applied: [] });
    const locker = track(createLocker({ connectionString: settings }));
    const lock = await locker.acquire('kv:lock', { fencing: true });
    expect(typeof lock.token).toBe('bigint');
    const held = (await locker.inspect()).locks.find((l) => l.name === 'kv:lock' || l.key === lock.key)!;
    expect(held.applicationName).toBe('pgfence kv');
    await lock.release();
  });
});

describe('several hosts, as libpq takes them', () => {
  it('reads comma-separated hosts and target_session_attrs from URLs, keyword/value settings and PGHOST', () => {
    expect(connectionTargets('postgresql://u:p@h1:5432,h2:5433,[::1]/db?target_session_attrs=read-write&sslmode=disable', {})).toEqual({
      hosts: [{ host: 'h1', port: 5432 }, { host: 'h2', port: 5433 }, { host: '::1', port: undefined }],
      targetSessionAttrs: 'read-write',
      baseUrl: 'postgresql://u:p@h1:5432/db?sslmode=disable',
    });
    expect(resolveConnectionString('host=h1,h2 port=5432,5433 dbname=app target_session_attrs=primary', {})).toBe(
      'postgresql://h1:5432,h2:5433/app?target_session_attrs=primary',
    );
    expect(connectionTargets('host=h1,h2 port=6000 dbname=app', {})!.hosts).toEqual([{ host: 'h1', port: 6000 }, { host: 'h2', port: 6000 }]);
    expect(connectionTargets(undefined, { PGHOST: 'a,b', PGDATABASE: 'd' })!.targetSessionAttrs).toBe('any');
    // One host that any session may use: node-postgres connects as always.
    expect(connectionTargets('postgresql://h1:5432/db', {})).toBeNull();
    expect(connectionTargets('postgresql://h1/db?target_session_attrs=read-write', {})!.hosts).toHaveLength(1);
  });

  it('refuses what cannot work for locks, before any I/O', () => {
    const bad: [string, RegExp][] = [
      ['postgresql://h1,h2/db?target_session_attrs=standby', /target_session_attrs=standby: pgfence locks on the primary/],
      ['postgresql://h1,h2/db?target_session_attrs=prefer-standby', /pgfence locks on the primary/],
      ['postgresql://h1,h2/db?target_session_attrs=rw', /expected read-write, primary or any, got "rw"/],
      ['postgresql://h1,,h2/db', /invalid host "" in the host list/],
      ['postgresql://h1:x,h2/db', /invalid host "h1:x"/],
      ['host=h1,h2,h3 port=1,2 dbname=d', /3 hosts but 2 ports/],
    ];
    for (const [text, message] of bad) {
      expect(() => resolveConnectionString(text, {}), text).toThrow(InvalidArgumentError);
      expect(() => createLocker({ connectionString: text }), text).toThrow(message);
    }
  });

  it('a locker skips a host that does not answer and locks on the next', async () => {
    const u = new URL(db.url);
    const dead = await freePort();
    const url = `postgresql://${u.username}${u.password ? `:${u.password}` : ''}@127.0.0.1:${dead},${u.host}${u.pathname}?target_session_attrs=read-write`;
    await expect(migrate({ connectionString: url })).resolves.toEqual({ applied: [] });
    const locker = track(createLocker({ connectionString: url }));
    const lock = await locker.acquire('multi:lock', { fencing: true });
    const lease = await locker.lease('multi:lease');
    expect(lease.token > 0n).toBe(true);
    await lease.release();
    await lock.release();
    // The command line reads the same strings.
    const main = fileURLToPath(new URL('../dist/cli/main.js', import.meta.url));
    for (const command of ['migrate', 'status']) {
      const { stdout } = await promisify(execFile)(process.execPath, [main, command, '--database-url', url], { timeout: 30_000 });
      expect(stdout, command).toMatch(command === 'status' ? /replication: no standby streaming, timeline 1/ : /up to date|applied|nothing/i);
    }
  });
});
