// The code blocks of the documentation (README.md, CONTRIBUTING.md, docs/*.md) and the @example
// blocks of the source, by fence: what test/docs.test.ts runs or type-checks. CONTRIBUTING.md
// ("Documentation that cannot rot") lists what each info string means.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { installedAtLeast } from './versions.js';

/** The package's entry points whose names a fragment may use without importing them. */
export const ADAPTERS = ['kysely', 'postgres', 'prisma', 'drizzle', 'typeorm', 'knex'] as const;
export type EntryPoint = 'pgfence' | `pgfence/${(typeof ADAPTERS)[number]}` | 'pgfence/pg-boss';
export const ENTRY_POINTS: readonly EntryPoint[] = ['pgfence', ...ADAPTERS.map((a) => `pgfence/${a}` as const), 'pgfence/pg-boss'];

export interface CodeBlock {
  /** Where it is, relative to the repository: `docs/kysely.md:12`. */
  where: string;
  /** The info string's first word: ts, js, sql, sh, text, ... ('' when there is none). */
  lang: string;
  /** The info string's other words: fragment, run, psql, output, twice. */
  flags: string[];
  code: string;
  /** The `text output` block right after it, if any: its expected output. */
  output?: string;
  /** Which entry point a source @example belongs to (its names need no import). */
  module: EntryPoint;
}

/** The documentation files: the README, CONTRIBUTING.md and every guide in docs/ (not the generated reference). */
export function documentationFiles(root: string): string[] {
  const docs = readdirSync(join(root, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => join('docs', f));
  return ['README.md', 'CONTRIBUTING.md', ...docs.sort()];
}

/** The fenced code blocks of one markdown file, with the indentation of their fence removed. */
export function markdownBlocks(root: string, file: string): CodeBlock[] {
  // A data layer's guide (docs/<adapter>.md): its fragments use that adapter's names, as its @examples do.
  const adapter = ADAPTERS.find((a) => file === join('docs', `${a}.md`));
  return fencedBlocks(readFileSync(join(root, file), 'utf8').split('\n'), file, adapter ? `pgfence/${adapter}` : 'pgfence');
}

/** The @example blocks in the comments of every source file under src/ (each line's leading ` * ` removed). */
export function sourceExamples(root: string): CodeBlock[] {
  const out: CodeBlock[] = [];
  for (const file of walk(join(root, 'src')).filter((f) => f.endsWith('.ts'))) {
    const path = relative(root, file);
    const adapter = ADAPTERS.find((a) => path.startsWith(`src/adapters/${a}/`));
    const module: EntryPoint = adapter ? `pgfence/${adapter}` : path.startsWith('src/pg-boss/') ? 'pgfence/pg-boss' : 'pgfence';
    const lines = readFileSync(file, 'utf8').split('\n');
    lines.forEach((line, i) => {
      if (!/^\s*\*\s*@example\s*$/.test(line)) return;
      const comment: string[] = [];
      for (let j = i + 1; j < lines.length && !/^\s*\*\//.test(lines[j]!) && !/^\s*\*\s*@\w/.test(lines[j]!); j++) {
        comment.push(lines[j]!.replace(/^\s*\* ?/, ''));
      }
      const blocks = fencedBlocks(comment, path, module, i + 1);
      if (blocks.length === 0) throw new Error(`${path}:${i + 1}: an @example without a fenced code block`);
      out.push(...blocks);
    });
  }
  return out;
}

function fencedBlocks(lines: string[], file: string, module: EntryPoint, lineOffset = 0): CodeBlock[] {
  const blocks: CodeBlock[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)```(.*)$/.exec(lines[i]!);
    if (!open) continue;
    const indent = open[1]!.length;
    const [lang = '', ...flags] = open[2]!.trim().split(/\s+/).filter(Boolean);
    const body: string[] = [];
    let j = i + 1;
    for (; j < lines.length && !/^\s*```\s*$/.test(lines[j]!); j++) body.push(lines[j]!.slice(Math.min(indent, /^\s*/.exec(lines[j]!)![0].length)));
    if (j === lines.length) throw new Error(`${file}:${lineOffset + i + 1}: a code block that is never closed`);
    const block: CodeBlock = { where: `${file}:${lineOffset + i + 1}`, lang, flags, code: `${body.join('\n')}\n`, module };
    const previous = blocks.at(-1);
    if (lang === 'text' && flags.includes('output') && previous) previous.output = block.code;
    blocks.push(block);
    i = j;
  }
  return blocks;
}

function walk(dir: string): string[] {
  return readdirSync(dir).flatMap((entry) => {
    const path = join(dir, entry);
    return statSync(path).isDirectory() ? walk(path) : [path];
  });
}

/** Names a fragment may use without importing them: declared by the stub (a guide's adapter may declare its own, see LIBRARY_STUBS). */
const STUB_DECLARATIONS: Record<string, string> = {
  Database: `interface Database {
  orders: { id: number; status: string; fencing_token: string | null };
  invoices: { id: number; status: string; fencing_token: string | null };
  counters: { id: number; n: number; fencing_token: string | null };
  documents: { id: number; body: string; version: string };
}`,
  locker: 'declare const locker: Locker;',
  pool: 'declare const pool: pg.Pool;',
  client: 'declare const client: pg.PoolClient;',
  db: 'declare const db: Kysely<Database>;',
  trx: 'declare const trx: Transaction<Database>;',
  lease: 'declare const lease: LeaseHandle;',
  lock: 'declare const lock: FencedLockHandle;',
  token: 'declare const token: bigint;',
  boss: 'declare const boss: BossLike & { createQueue(name: string, options?: object): Promise<unknown> };',
  url: 'declare const url: string;',
  callVendor: 'declare function callVendor(...args: unknown[]): Promise<unknown>;',
  buildReport: 'declare function buildReport(...args: unknown[]): Promise<unknown>;',
  startScheduling: 'declare function startScheduling(...args: unknown[]): void;',
  stopScheduling: 'declare function stopScheduling(...args: unknown[]): void;',
};

/**
 * What an adapter's fragments (its @examples, its guide's `ts fragment` blocks) may use of its library
 * without importing it: the imports the declarations need, and declarations that replace the stub's of
 * the same name (`db` is a Drizzle database in pgfence/drizzle's fragments, a Kysely one elsewhere).
 */
export const LIBRARY_STUBS: Partial<Record<EntryPoint, { imports: string[]; declarations: Record<string, string> }>> = {
  // The test fixture's generated client (test/fixtures/prisma/schema.prisma), from the scratch folder <root>/.pgfence-test/doc-blocks-*.
  'pgfence/prisma': {
    imports: ["import type { PrismaClient as FixturePrismaClient, Prisma as FixturePrisma } from '../../test/fixtures/prisma/generated/client.js';"],
    declarations: { prisma: 'declare const prisma: FixturePrismaClient;', tx: 'declare const tx: FixturePrisma.TransactionClient;' },
  },
};

/** Types of the entry points a fragment may name without importing them. */
const STUB_TYPES: Record<EntryPoint, string[]> = {
  pgfence: ['Locker', 'LockHandle', 'FencedLockHandle', 'LeaseHandle', 'Semaphore', 'LeaderElection'],
  'pgfence/kysely': ['AnyKysely'],
  'pgfence/postgres': [],
  'pgfence/prisma': ['PrismaModelName', 'PrismaModelFields'],
  'pgfence/drizzle': [],
  'pgfence/typeorm': [],
  'pgfence/knex': [],
  'pgfence/pg-boss': ['BossLike', 'LockedJob'],
};

/**
 * A fragment as a module that type-checks: its own import lines first, then imports of every other
 * name of its entry point (the root export's too), the stub's declarations, and its statements in
 * an async function.
 */
export function fragmentModule(block: CodeBlock, exportsOf: Record<EntryPoint, string[]>): string {
  const lines = block.code.split('\n');
  const imports = lines.filter((l) => /^import\s/.test(l));
  const body = lines.filter((l) => !/^import\s/.test(l));
  const imported = new Set(imports.flatMap((l) => [...l.replace(/^import\s+(type\s+)?/, '').replace(/\bfrom\b.*$/, '').matchAll(/\b(\w+)\b/g)].map((m) => m[1]!)));
  const taken = new Set(imported);
  const stubImports: string[] = [];
  const bring = (module: EntryPoint, names: string[], typeOnly: boolean) => {
    const fresh = names.filter((n) => !taken.has(n));
    fresh.forEach((n) => taken.add(n));
    if (fresh.length > 0) stubImports.push(`import ${typeOnly ? 'type ' : ''}{ ${fresh.join(', ')} } from '${module}';`);
  };
  // The block's own entry point first: its names win over the root export's (xactLock, fencedUpdate, ...).
  for (const module of [block.module, 'pgfence', 'pgfence/pg-boss'] as const) {
    bring(module, exportsOf[module], false);
    bring(module, STUB_TYPES[module], true);
  }
  if (!taken.has('pg')) stubImports.push("import pg from 'pg';");
  const kyselyTypes = ['Kysely', 'Transaction'].filter((n) => !taken.has(n));
  if (kyselyTypes.length > 0) stubImports.push(`import type { ${kyselyTypes.join(', ')} } from 'kysely';`);
  if (!taken.has('Migrator')) stubImports.push(`import { Migrator } from '${installedAtLeast('kysely', 0, 29) ? 'kysely/migration' : 'kysely'}';`);
  const library = LIBRARY_STUBS[block.module];
  const declarations = { ...STUB_DECLARATIONS, ...library?.declarations };
  return [
    ...imports,
    ...stubImports,
    ...(library?.imports ?? []),
    ...Object.entries(declarations)
      .filter(([name]) => !imported.has(name))
      .map(([, declaration]) => declaration),
    `// ${block.where}`,
    'export async function fragment(): Promise<void> {',
    ...body.map((l) => `  ${l}`),
    '}',
    '',
  ].join('\n');
}
