/**
 * The pgfence command's arguments, tokenized by node:util's parseArgs: `--flag value`, `--flag=value`,
 * boolean flags (`--json`, `--no-fencing`), flags whose value is optional (`--watch [interval]`),
 * positionals anywhere among the flags, and `--` ending pgfence's own arguments (what follows is
 * returned untouched, e.g. the child command of `pgfence run`). Every mistake is a UsageError.
 */

import { parseArgs as tokenize } from 'node:util';
import { MAX_DURATION_MS } from '../options.js';
import { EXIT } from './exit-codes.js';
import { didYouMean } from './suggest.js';

/** A mistake on the command line: the command prints it with its usage and exits 64 (EX_USAGE). */
export class UsageError extends Error {
  readonly exitCode = EXIT.USAGE;
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

/**
 * 'string' and 'duration' take a value; 'boolean' takes none; 'optional-duration' takes a value
 * only when the next argument is one (or with `--flag=value`), else it is `true`.
 */
type FlagType = 'string' | 'duration' | 'boolean' | 'optional-duration' | 'number';

export interface FlagSpec {
  type: FlagType;
  /** One-letter alias, e.g. 'h'. */
  short?: string;
  /** For durations: accept 'forever' (Infinity). */
  allowInfinity?: boolean;
  /** For durations and numbers: the smallest value accepted (default 0). */
  min?: number;
  /** For numbers: the largest value accepted. */
  max?: number;
  /** For numbers: whole numbers only. */
  integer?: boolean;
}

type FlagValue = string | number | boolean;

export interface ParsedArgs {
  flags: Record<string, FlagValue | undefined>;
  positionals: string[];
  /** What followed `--`, or null when there was no `--`. */
  rest: string[] | null;
}

export function parseArgs(argv: readonly string[], specs: Record<string, FlagSpec>): ParsedArgs {
  const flags: Record<string, FlagValue | undefined> = {};
  const positionals: string[] = [];
  const shorts = new Map(Object.entries(specs).flatMap(([name, s]) => (s.short ? [[s.short, name] as const] : [])));
  // Non-strict: the checks and their messages are pgfence's own, below. An optional duration is a
  // boolean to parseArgs; its value, when the next argument is one, is taken here.
  const options = Object.fromEntries(
    Object.entries(specs).map(([name, s]) => [name, { type: s.type === 'boolean' || s.type === 'optional-duration' ? 'boolean' : 'string' } as const]),
  );
  const { tokens } = tokenize({ args: [...argv], options, strict: false, allowPositionals: true, tokens: true });
  let consumed = -1; // the index of an argument taken as an optional duration's value
  for (const token of tokens) {
    if (token.index === consumed) continue;
    if (token.kind === 'option-terminator') return { flags, positionals, rest: argv.slice(token.index + 1) };
    if (token.kind === 'positional') {
      positionals.push(token.value);
      continue;
    }
    const arg = argv[token.index]!;
    if (!token.rawName.startsWith('--')) {
      // One short boolean flag per argument: no groups (-qh), no values (-d x).
      const name = token.rawName === arg ? shorts.get(arg.slice(1)) : undefined;
      if (name === undefined) throw new UsageError(`unknown option ${arg}`);
      if (specs[name]!.type !== 'boolean') throw new UsageError(`use --${name} <value> rather than ${arg}`);
      flags[name] = true;
      continue;
    }
    const name = token.name;
    const spec = Object.hasOwn(specs, name) ? specs[name] : undefined;
    if (!spec) throw new UsageError(`unknown option --${name}${didYouMean(name, Object.keys(specs), (c) => `--${c}`)}`);
    if (name in flags) throw new UsageError(`--${name} was given more than once`);
    const inline = token.inlineValue ? token.value : undefined;
    if (spec.type === 'boolean') {
      flags[name] = inline === undefined ? true : parseBoolean(name, inline);
    } else if (spec.type === 'optional-duration') {
      const next = argv[token.index + 1];
      if (inline !== undefined) flags[name] = checkDuration(name, inline, spec);
      else if (next !== undefined && looksLikeDuration(next)) {
        flags[name] = checkDuration(name, next, spec);
        consumed = token.index + 1;
      } else flags[name] = true;
    } else {
      if (token.value === undefined || (!token.inlineValue && token.value === '--')) throw new UsageError(`--${name} needs a value`);
      flags[name] = parseValue(name, token.value, spec);
    }
  }
  return { flags, positionals, rest: null };
}

/** What the options before the command ask for (as git and gh take them). */
export type GlobalArgs =
  | { kind: 'version' }
  | { kind: 'help' }
  /** `forward`: the --database-url arguments, handed on to the command; `rest`: what follows the command. */
  | { kind: 'command'; command: string | undefined; forward: string[]; rest: string[] };

const GLOBAL_FLAGS = {
  'database-url': { type: 'string' },
  version: { type: 'boolean', short: 'V' },
  help: { type: 'boolean', short: 'h' },
} as const;

/**
 * Reads the global options, up to the command (the first argument that does not start with '-'):
 * --version and --help answer at once, --database-url is handed on. Anything else, also `-` and `--`,
 * is a UsageError: command options go after the command.
 */
export function parseGlobalArgs(argv: readonly string[]): GlobalArgs {
  const forward: string[] = [];
  const { tokens } = tokenize({ args: [...argv], options: GLOBAL_FLAGS, strict: false, allowPositionals: true, tokens: true });
  for (const token of tokens) {
    const arg = argv[token.index]!;
    if (!arg.startsWith('-')) return { kind: 'command', command: arg, forward, rest: argv.slice(token.index + 1) };
    // One flag per argument: no groups (-Vh), no values (--version=1).
    const whole = token.kind === 'option' && token.rawName === arg;
    if (whole && token.name === 'version') return { kind: 'version' };
    if (whole && token.name === 'help') return { kind: 'help' };
    if (token.kind === 'option' && token.rawName === '--database-url') {
      // Like every string option of node:util, the next argument is its value whatever it looks like.
      if (token.value === undefined) throw new UsageError('--database-url needs a value');
      forward.push(...argv.slice(token.index, token.index + (token.inlineValue ? 1 : 2)));
      continue;
    }
    const name = arg.replace(/^--?/, '').split('=')[0]!;
    const suggestion = didYouMean(name, Object.keys(GLOBAL_FLAGS), (c) => `--${c}`);
    throw new UsageError(`unknown option ${arg} before the command${suggestion || ' (command options go after the command)'}`);
  }
  return { kind: 'command', command: undefined, forward, rest: [] };
}

function parseBoolean(name: string, value: string): boolean {
  if (value === 'true' || value === '1' || value === 'yes') return true;
  if (value === 'false' || value === '0' || value === 'no') return false;
  throw new UsageError(`--${name} takes no value (or true/false), got "${value}"`);
}

function parseValue(name: string, value: string, spec: FlagSpec): FlagValue {
  if (spec.type === 'duration') return checkDuration(name, value, spec);
  if (spec.type === 'number') {
    // Decimal digits only, as for durations: no 1e3, 0x10 or Infinity.
    const n = NUMBER.test(value.trim()) ? Number(value) : NaN;
    if (!Number.isFinite(n)) throw new UsageError(`--${name}: expected a number (decimal digits), got "${value}"`);
    if (spec.integer && !Number.isInteger(n)) throw new UsageError(`--${name}: expected a whole number, got "${value}"`);
    if (n < (spec.min ?? 0)) throw new UsageError(`--${name}: must be at least ${spec.min ?? 0}, got ${value}`);
    if (spec.max !== undefined && n > spec.max) throw new UsageError(`--${name}: must be at most ${spec.max}, got ${value}`);
    return n;
  }
  if (value === '') throw new UsageError(`--${name} must not be empty`);
  return value;
}

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };
/**
 * Decimal digits with an optional unit. Exponents (1e3) and JavaScript's Infinity are refused, for
 * durations and plain numbers alike: the one unbounded duration is spelled "forever".
 */
const DURATION = /^(-?)(\d+(?:\.\d+)?|\.\d+)(ms|s|m|h)?$/;
const NUMBER = /^-?(\d+(?:\.\d+)?|\.\d+)$/;
const INFINITE = new Set(['forever']);

function looksLikeDuration(value: string): boolean {
  return DURATION.test(value.trim()) || INFINITE.has(value.trim().toLowerCase());
}

/**
 * Milliseconds from "500ms", "30s", "1.5s", "2m", "1h" or a plain number (milliseconds); with
 * `allowInfinity`, also "forever". Throws a UsageError naming the flag.
 */
function parseDuration(value: string, flag: string, opts: { allowInfinity?: boolean; min?: number } = {}): number {
  const text = value.trim();
  if (opts.allowInfinity && INFINITE.has(text.toLowerCase())) return Infinity;
  const m = DURATION.exec(text);
  if (!m) {
    const hint = /^[+-]?(inf|infinity)$/i.test(text)
      ? opts.allowInfinity
        ? ' (write "forever" for no limit)'
        : ' (this option takes no unbounded value)'
      : /^[+-]?[\d.]+e[+-]?\d+/i.test(text)
        ? ' (write the digits out: exponents such as 1e3 are not accepted)'
        : '';
    throw new UsageError(
      `${flag}: expected a duration such as 500ms, 30s, 2m or 1h (a plain number means milliseconds)` +
        `${opts.allowInfinity ? ', or "forever"' : ''}, got "${value}"${hint}`,
    );
  }
  if (m[1] === '-') throw new UsageError(`${flag}: must not be negative, got "${value}"`);
  const ms = Math.round(Number(m[2]) * UNITS[m[3] ?? 'ms']!);
  if (ms > MAX_DURATION_MS) throw new UsageError(`${flag}: must be at most 365 days, got "${value}"`);
  const min = opts.min ?? 0;
  if (ms < min) throw new UsageError(`${flag}: must be at least ${formatMs(min)}, got "${value}"`);
  return ms;
}

function checkDuration(name: string, value: string, spec: FlagSpec): number {
  return parseDuration(value, `--${name}`, { allowInfinity: spec.allowInfinity, min: spec.min });
}

/** A duration as the user would write it: 1500 -> "1.5s", 120000 -> "2m". */
export function formatMs(ms: number): string {
  if (ms === Infinity) return 'forever';
  if (ms < 1000) return `${ms}ms`;
  if (ms < 60_000 || ms % 60_000 !== 0) return `${ms / 1000}s`;
  if (ms < 3_600_000 || ms % 3_600_000 !== 0) return `${ms / 60_000}m`;
  return `${ms / 3_600_000}h`;
}

/** Accessors that keep the commands free of casts. */
export function stringFlag(args: ParsedArgs, name: string): string | undefined {
  const v = args.flags[name];
  return typeof v === 'string' ? v : undefined;
}

export function numberFlag(args: ParsedArgs, name: string): number | undefined {
  const v = args.flags[name];
  return typeof v === 'number' ? v : undefined;
}

export function booleanFlag(args: ParsedArgs, name: string): boolean {
  return args.flags[name] === true;
}
