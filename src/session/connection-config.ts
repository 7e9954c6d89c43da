/**
 * Where a connection goes, read as libpq (and psql) read it: a URL (postgres:// or postgresql://), a
 * keyword/value string ("host=db port=5432 dbname=app user=me"), or nothing but the PG* environment.
 * The result is one URL that node-postgres parses; what the string leaves out (user, password,
 * database, host, port, sslmode) node-postgres takes from PGUSER, PGPASSWORD, PGDATABASE, PGHOST,
 * PGPORT and PGSSLMODE itself, as libpq does. Mistakes are InvalidArgumentErrors, before any I/O.
 */

import type pg from 'pg';
import { InvalidArgumentError } from '../core/index.js';

type Env = Record<string, string | undefined>;

/** The PG* variables that say where the database is (PGSSLMODE, PGAPPNAME only say how). */
export type TargetSessionAttrs = 'any' | 'read-write' | 'primary';

export interface HostPort {
  host: string;
  port: number | undefined;
}

export interface ConnectionTargets {
  hosts: HostPort[];
  targetSessionAttrs: TargetSessionAttrs;
  /** A single-host URL (the first host, without target_session_attrs) for everything else in the string. */
  baseUrl: string;
}

const LIBPQ_ENV = ['PGHOST', 'PGPORT', 'PGUSER', 'PGDATABASE', 'PGPASSWORD'] as const;

/** Keywords node-postgres honours; the other libpq keywords are refused rather than ignored. */
const KEYWORDS = new Set([
  'host', 'hostaddr', 'port', 'dbname', 'user', 'password',
  'sslmode', 'sslcert', 'sslkey', 'sslrootcert', 'application_name', 'fallback_application_name', 'options', 'client_encoding',
  'target_session_attrs', // pgfence's own (multi-host.ts): node-postgres takes one host
]);
const LIBPQ_ONLY = new Set([
  'passfile', 'channel_binding', 'connect_timeout', 'keepalives', 'keepalives_idle', 'keepalives_interval',
  'keepalives_count', 'tcp_user_timeout', 'replication', 'gssencmode', 'requiressl', 'sslcompression', 'sslpassword',
  'sslcertmode', 'sslcrl', 'sslcrldir', 'sslsni', 'requirepeer', 'ssl_min_protocol_version', 'ssl_max_protocol_version',
  'krbsrvname', 'gsslib', 'gssdelegation', 'service', 'load_balance_hosts', 'sslnegotiation', 'require_auth',
]);

function isUrl(text: string): boolean {
  return /^postgres(ql)?:\/\//i.test(text.trim());
}

/** Whether the environment names a database the way psql would find it (PGHOST, PGDATABASE, ...). */
export function hasLibpqEnv(env: Env = process.env): boolean {
  return LIBPQ_ENV.some((name) => (env[name] ?? '').trim() !== '');
}

/**
 * The connection string as a URL: a URL is checked and returned as given; keyword/value settings
 * are turned into the same URL; without a string, the URL is built from PGHOST, PGPORT, PGUSER,
 * PGPASSWORD and PGDATABASE. A socket path ("/var/run/postgresql ...", node-postgres' own form) is
 * left as it is.
 */
export function resolveConnectionString(input: string | undefined, env: Env = process.env): string {
  if (input === undefined) return urlFrom(fromEnv(env));
  const text = input.trim();
  if (text === '') throw new InvalidArgumentError('connectionString', 'must not be empty');
  if (text.startsWith('/')) return input;
  if (isUrl(text)) {
    if (connectionTargets(text) !== null) return text; // several hosts: checked there
    try {
      new URL(text);
    } catch {
      throw new InvalidArgumentError('connectionString', `not a valid URL: "${redactUrl(text)}"`);
    }
    return text;
  }
  return urlFrom(parseKeywordValue(text));
}

/**
 * Several hosts (`h1:5432,h2:5433`) or a target_session_attrs other than 'any', as libpq reads them;
 * null for one host that any session may use (node-postgres then connects as it always does).
 */
export function connectionTargets(input: string | undefined, env: Env = process.env): ConnectionTargets | null {
  const text = input === undefined ? resolveConnectionString(undefined, env) : input.trim();
  if (!isUrl(text)) return text.startsWith('/') ? null : connectionTargets(resolveConnectionString(text, env), env);
  const m = /^(postgres(?:ql)?:\/\/)([^/?#]*@)?([^/?#]*)([^?#]*)(\?[^#]*)?(#.*)?$/i.exec(text);
  if (!m) throw new InvalidArgumentError('connectionString', `not a valid URL: "${redactUrl(text)}"`);
  const [, scheme, auth = '', hostList = '', path = '', query = ''] = m;
  const params = new URLSearchParams(query.slice(1));
  const attrs = targetSessionAttrs(params.get('target_session_attrs'));
  if (!hostList.includes(',') && attrs === 'any') return null;
  const hosts = hostList.split(',').map(hostPort);
  params.delete('target_session_attrs');
  const rest = params.toString();
  const first = hostList.split(',')[0]!;
  const baseUrl = `${scheme}${auth}${first}${path}${rest ? `?${rest}` : ''}`;
  try {
    new URL(baseUrl);
  } catch {
    throw new InvalidArgumentError('connectionString', `not a valid URL: "${redactUrl(text)}"`);
  }
  return { hosts, targetSessionAttrs: attrs, baseUrl };
}

function targetSessionAttrs(value: string | null): TargetSessionAttrs {
  if (value === null || value === 'any') return 'any';
  if (value === 'read-write' || value === 'primary') return value;
  if (['read-only', 'standby', 'prefer-standby'].includes(value)) {
    throw new InvalidArgumentError('connectionString', `target_session_attrs=${value}: pgfence locks on the primary (use read-write, primary or any)`);
  }
  throw new InvalidArgumentError('connectionString', `target_session_attrs: expected read-write, primary or any, got "${value}"`);
}

function hostPort(entry: string): HostPort {
  const m = /^(\[[^\]]*\]|[^:[\]]*)(?::(\d{1,5}))?$/.exec(entry);
  if (!m || m[1] === '') throw new InvalidArgumentError('connectionString', `invalid host "${entry}" in the host list`);
  const host = decodeURIComponent(m[1]!.replace(/^\[(.*)\]$/, '$1'));
  return { host, port: m[2] !== undefined ? Number(m[2]) : undefined };
}

/** The same, as a node-postgres ClientConfig (for a pg.Pool or pg.Client). */
export function connectionConfig(input: string | undefined, env: Env = process.env): pg.ClientConfig {
  return { connectionString: resolveConnectionString(input, env) };
}

function fromEnv(env: Env): Map<string, string> {
  const settings = new Map<string, string>();
  const take = (variable: string, keyword: string) => {
    const v = env[variable];
    if (v !== undefined && v !== '') settings.set(keyword, v);
  };
  take('PGHOST', 'host');
  take('PGPORT', 'port');
  take('PGUSER', 'user');
  take('PGPASSWORD', 'password');
  take('PGDATABASE', 'dbname');
  return settings;
}

/**
 * libpq's keyword/value syntax: `keyword = value` pairs separated by whitespace; a value is either
 * bare (a backslash escapes the next character) or single-quoted (`\'` and `\\` inside).
 */
export function parseKeywordValue(text: string): Map<string, string> {
  const settings = new Map<string, string>();
  let i = 0;
  const space = () => {
    while (i < text.length && /\s/.test(text[i]!)) i++;
  };
  for (space(); i < text.length; space()) {
    let keyword = '';
    while (i < text.length && text[i] !== '=' && !/\s/.test(text[i]!)) keyword += text[i++];
    space();
    if (text[i] !== '=') {
      throw new InvalidArgumentError('connectionString', `expected a URL or keyword=value settings: missing "=" after "${keyword}"`);
    }
    i++;
    space();
    let value = '';
    if (text[i] === "'") {
      i++;
      for (;;) {
        if (i >= text.length) throw new InvalidArgumentError('connectionString', `unterminated quoted value of "${keyword}"`);
        const c = text[i++]!;
        if (c === "'") break;
        if (c === '\\' && i < text.length) value += text[i++];
        else value += c;
      }
    } else {
      while (i < text.length && !/\s/.test(text[i]!)) {
        const c = text[i++]!;
        if (c === '\\' && i < text.length) value += text[i++];
        else value += c;
      }
    }
    const key = keyword.toLowerCase();
    if (LIBPQ_ONLY.has(key)) {
      throw new InvalidArgumentError('connectionString', `"${keyword}" is a libpq setting that node-postgres does not support`);
    }
    if (!KEYWORDS.has(key)) throw new InvalidArgumentError('connectionString', `unknown connection setting "${keyword}"`);
    settings.set(key, value);
  }
  if (settings.size === 0) throw new InvalidArgumentError('connectionString', 'no settings in the connection string');
  return settings;
}

function urlFrom(settings: Map<string, string>): string {
  const s = new Map(settings);
  const take = (k: string) => {
    const v = s.get(k);
    s.delete(k);
    return v;
  };
  const hostaddr = take('hostaddr');
  let host = take('host') ?? hostaddr ?? '';
  const port = take('port');
  if (port !== undefined && !/^\d{1,5}(,\d{1,5})*$/.test(port)) throw new InvalidArgumentError('connectionString', `invalid port "${port}"`);
  const user = take('user');
  const password = take('password');
  const dbname = take('dbname');
  // A socket directory goes in the query (node-postgres reads ?host=); the URL keeps a placeholder host.
  let hostPorts: string;
  if (host.startsWith('/')) {
    s.set('host', host);
    hostPorts = `localhost${port !== undefined ? `:${port}` : ''}`;
  } else {
    // libpq: host=h1,h2 with one port for all, or one port per host.
    const hosts = host.split(',').map((h) => (h.includes(':') && !h.startsWith('[') ? `[${h}]` : h)); // IPv6
    const ports = port?.split(',') ?? [];
    if (ports.length > 1 && ports.length !== hosts.length) {
      throw new InvalidArgumentError('connectionString', `${hosts.length} hosts but ${ports.length} ports`);
    }
    if (hosts.length > 1 && hosts.some((h) => h === '' || h.startsWith('/'))) {
      throw new InvalidArgumentError('connectionString', `invalid host list "${host}"`);
    }
    hostPorts = hosts.map((h, i) => `${h}${ports.length > 0 ? `:${ports[Math.min(i, ports.length - 1)]}` : ''}`).join(',');
  }
  let auth = '';
  if (hostPorts === '' || hostPorts.startsWith(':')) {
    // A URL with a user but no host is not a URL: then the user (and password) go in the query.
    if (user !== undefined) s.set('user', user);
    if (password !== undefined) s.set('password', password);
  } else if (user !== undefined || password !== undefined) {
    auth = `${encodeURIComponent(user ?? '')}${password !== undefined ? `:${encodeURIComponent(password)}` : ''}@`;
  }
  const query = [...s].map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join('&');
  const url = `postgresql://${auth}${hostPorts}/${dbname !== undefined ? encodeURIComponent(dbname) : ''}${query ? `?${query}` : ''}`;
  try {
    if (connectionTargets(url) === null) new URL(url);
  } catch {
    throw new InvalidArgumentError('connectionString', `invalid host "${host}"`);
  }
  return url;
}

/**
 * The URL with an application_name (shown by `pgfence status` and pg_stat_activity) unless it
 * already has one; connection strings that are not URLs are left as they are.
 */
export function withApplicationName(url: string, applicationName: string): string {
  // PostgreSQL keeps 63 bytes of it.
  let name = applicationName;
  while (Buffer.byteLength(name) > 63) name = name.slice(0, -1);
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    // Several hosts (h1:5432,h2:5433) are no WHATWG URL: add the parameter as text.
    if (!isUrl(url) || /[?&]application_name=/.test(url)) return url;
    return `${url}${url.includes('?') ? '&' : '?'}application_name=${encodeURIComponent(name)}`;
  }
  if (u.searchParams.has('application_name')) return url;
  u.searchParams.set('application_name', name);
  return u.toString();
}

/** The URL (or keyword/value settings) without its password, for messages. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    if (u.searchParams.has('password')) u.searchParams.set('password', '***');
    return u.toString();
  } catch {
    // Not a WHATWG URL (several hosts, a bad one, keyword/value settings): the password by pattern.
    return url.replace(/password=[^\s&]+/gi, 'password=***').replace(/^(postgres(?:ql)?:\/\/[^:/@]*:)[^@]*@/i, '$1***@');
  }
}
