// Documentation that cannot rot: every fenced code block of the README, CONTRIBUTING.md and docs/,
// and every @example of the source, is run or type-checked according to its info string
// (CONTRIBUTING.md, "Documentation that cannot rot"); TypeDoc builds the reference without a warning.
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CodeBlock, documentationFiles, ENTRY_POINTS, type EntryPoint, fragmentModule, markdownBlocks, sourceExamples } from './support/doc-blocks.js';
import { useMigratedDatabase, useTestDatabase } from './support/db.js';

const run = promisify(execFile);
const root = fileURLToPath(new URL('..', import.meta.url));
const docs = documentationFiles(root).flatMap((file) => markdownBlocks(root, file));
const examples = sourceExamples(root);
const all = [...docs, ...examples];
const kinds = (lang: string, ...flags: string[]) => all.filter((b) => b.lang === lang && flags.every((f) => b.flags.includes(f)));

/** The info strings a block may carry (CONTRIBUTING.md): anything else is a mistake the test names. */
const KNOWN = new Set(['ts', 'ts fragment', 'js', 'js run', 'sql psql', 'sql psql twice', 'sql fragment', 'sh', 'python fragment', 'go fragment', 'json', 'text', 'text output', 'mermaid']);
const info = (b: CodeBlock) => [b.lang, ...b.flags].join(' ');
/** A block that shows a file of the repository (`python file=examples/x.py`): the file's own test runs it. */
const fileOf = (b: CodeBlock) => b.flags.find((f) => f.startsWith('file='))?.slice('file='.length);

let scratch: string;
beforeAll(async () => {
  await mkdir(join(root, '.pgfence-test'), { recursive: true });
  // Inside the repository: the blocks import 'pgfence' by its name, which resolves to this package.
  scratch = await mkdtemp(join(root, '.pgfence-test', 'doc-blocks-'));
});
afterAll(async () => {
  await rm(scratch, { recursive: true, force: true });
});

describe('documentation code blocks', () => {
  it('are found: the README, every guide and every public method have some', () => {
    expect(docs.filter((b) => b.where.startsWith('README.md')).length).toBeGreaterThan(3);
    for (const file of documentationFiles(root).filter((f) => f.startsWith('docs/') && f !== 'docs/ARCHITECTURE.md')) {
      expect(docs.some((b) => b.where.startsWith(`${file}:`)), file).toBe(true);
    }
    expect(examples.length).toBeGreaterThan(30);
  });

  it('each say what they are: a known info string', () => {
    expect(all.filter((b) => !KNOWN.has(info(b)) && !(fileOf(b) && b.flags.length === 1)).map((b) => `${b.where}: \`\`\`${info(b)}`)).toEqual([]);
  });

  it('`<lang> file=<path>` blocks show that file as it is (the file runs in its own test)', () => {
    const shown = all.filter((b) => fileOf(b) !== undefined);
    const stale = shown.filter((b) => !existsSync(join(root, fileOf(b)!)) || readFileSync(join(root, fileOf(b)!), 'utf8').trimEnd() !== b.code.trimEnd());
    expect(stale.map((b) => `${b.where}: differs from ${fileOf(b)}`)).toEqual([]);
  });

  it('TypeScript blocks and fragments (with the source @examples) type-check against the built package', async () => {
    const blocks = [...kinds('ts'), ...kinds('js').filter((b) => !b.flags.includes('run'))];
    // Each entry point's names, from the built file package.json's "exports" maps it to.
    const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { exports: Record<string, { default: string }> };
    const exportsOf = Object.fromEntries(
      await Promise.all(
        ENTRY_POINTS.map(async (e) => [e, Object.keys(await import(pathToFileURL(join(root, manifest.exports[e.replace(/^pgfence/, '.')]!.default)).href))] as const),
      ),
    ) as Record<EntryPoint, string[]>;
    const files = new Map<string, CodeBlock>();
    await Promise.all(
      blocks.map(async (block, i) => {
        const name = `block${String(i).padStart(3, '0')}.${block.lang === 'js' ? 'mjs' : 'ts'}`;
        files.set(name, block);
        await writeFile(join(scratch, name), block.flags.includes('fragment') ? fragmentModule(block, exportsOf) : block.code);
      }),
    );
    await writeFile(
      join(scratch, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          strict: true,
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          target: 'ES2022',
          lib: ['ES2023', 'ESNext.Disposable'],
          types: ['node'],
          noEmit: true,
          skipLibCheck: true,
          allowJs: true,
          checkJs: true,
        },
        files: [...files.keys()],
      }),
    );
    const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
    const result = await run(process.execPath, [tsc, '-p', join(scratch, 'tsconfig.json')], { maxBuffer: 1 << 24 }).catch((e: { stdout: string }) => e);
    // Each error, with the block it is in (the stub's lines come before a fragment's own).
    const errors = result.stdout
      .split('\n')
      .filter(Boolean)
      .map((line) => {
        const file = /(block\d+\.m?ts)\(/.exec(line)?.[1];
        return file ? `${files.get(file)!.where} (${info(files.get(file)!)}): ${line}` : line;
      });
    expect(errors).toEqual([]);
  }, 180_000);

  it('`js run` blocks run as written (an ES module importing pgfence by its name), and print their output block', async () => {
    const blocks = kinds('js', 'run');
    expect(blocks.map((b) => b.where)).toContain(docs.find((b) => b.lang === 'js' && b.where.startsWith('README.md'))!.where); // the Quick start
    for (const block of blocks) {
      const url = (await useTestDatabase('doc_run')).url; // fresh: the block's migrate() creates the schema
      const { stdout } = await run(process.execPath, ['--input-type=module', '-e', block.code], {
        cwd: root,
        env: { ...process.env, DATABASE_URL: url },
        timeout: 60_000,
      });
      if (block.output !== undefined) expect(stdout, block.where).toBe(block.output);
    }
  });

  it('`sql psql` blocks run with psql (a `twice` block twice in a row), printing their output block', async () => {
    const blocks = kinds('sql', 'psql');
    expect(blocks.length).toBeGreaterThan(0);
    for (const block of blocks) {
      const url = (await useMigratedDatabase('doc_psql')).url;
      let stdout = '';
      for (let n = block.flags.includes('twice') ? 2 : 1; n > 0; n--) {
        const p = run('psql', ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', url], { timeout: 60_000 });
        p.child.stdin!.end(block.code);
        stdout += (await p).stdout;
      }
      if (block.output !== undefined) expect(stdout, block.where).toMatch(outputPattern(block.output));
    }
  });

  it('`sql fragment` blocks prepare (parsed and planned against the tables the docs write to)', async () => {
    const blocks = kinds('sql', 'fragment');
    expect(blocks.length).toBeGreaterThan(0);
    const client = new pg.Client({ connectionString: (await useMigratedDatabase('doc_sql')).url });
    await client.connect();
    try {
      await client.query(`CREATE TABLE invoices (id int PRIMARY KEY, status text, fencing_token bigint);
        CREATE TABLE orders (id int PRIMARY KEY, status text, state text, fencing_token bigint);
        CREATE TABLE counters (id int PRIMARY KEY, n int, fencing_token bigint);
        CREATE TABLE example_invoices (id int PRIMARY KEY, status text, fencing_token bigint);
        CREATE TABLE documents (id int PRIMARY KEY, body text, version bigint NOT NULL DEFAULT 0)`);
      for (const block of blocks) {
        const names: string[] = [];
        // $token, $id: parameters, numbered by first appearance.
        const text = block.code.replace(/\$([a-z_]\w*)/gi, (_m, name: string) => `$${(names.includes(name) ? names : (names.push(name), names)).indexOf(name) + 1}`);
        await expect(client.query(`PREPARE doc_block AS ${text.replace(/;\s*(--.*)?\s*$/, '')}`), block.where).resolves.toBeDefined();
        await client.query('DEALLOCATE doc_block');
      }
    } finally {
      await client.end();
    }
  });

  it('`sh` blocks name commands, scripts, files and flags that exist', async () => {
    const scripts = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
    const helps = new Map<string, Promise<string>>();
    const helpOf = (command: string) => {
      if (!helps.has(command)) {
        helps.set(command, run(process.execPath, [join(root, 'dist/cli/main.js'), command, '--help']).then((r) => r.stdout));
      }
      return helps.get(command)!;
    };
    const problems: string[] = [];
    for (const block of kinds('sh')) {
      for (const raw of block.code.split('\n')) {
        // A crontab line is read from its command; a trailing comment and leading VAR=value go.
        const line = raw.replace(/\s+#.*$/, '').replace(/^([*\d/,-]+\s+){5}/, '').trim();
        if (line === '') continue;
        for (const command of line.split('&&').map((c) => c.trim().split(/\s+/).filter((t) => !/^[A-Z_]+=/.test(t)))) {
          const [program, sub, ...rest] = command;
          const say = (what: string) => problems.push(`${block.where}: ${raw.trim()}: ${what}`);
          if (program === 'npm') {
            if (sub === 'run' && !(rest[0]! in scripts)) say(`no npm script "${rest[0]}"`);
            else if (!['install', 'ci', 'test', 'start', 'run'].includes(sub!)) say(`npm ${sub}?`);
          } else if (program === 'node' || program === 'bash') {
            if (!existsSync(join(root, sub!))) say(`no file ${sub}`);
          } else if (program === 'pgfence') {
            const flags = rest.slice(0, rest.includes('--') ? rest.indexOf('--') : rest.length).filter((t) => t.startsWith('--'));
            const help = await helpOf(sub!).catch(() => null);
            if (help === null) say(`no pgfence command "${sub}"`);
            for (const flag of flags) if (help !== null && !help.includes(flag.replace(/=.*$/, ''))) say(`pgfence ${sub} has no ${flag}`);
          } else {
            say(`an unknown command "${program}" (mark the block \`text\` if it is not one to check)`);
          }
        }
      }
    }
    expect(problems).toEqual([]);
  });

  it('`python fragment` and `go fragment` blocks parse; `json` blocks are JSON', async () => {
    for (const block of kinds('python', 'fragment')) {
      const p = run('python3', ['-c', 'import ast, sys; ast.parse(sys.stdin.read())']);
      p.child.stdin!.end(block.code);
      await expect(p, block.where).resolves.toBeDefined();
    }
    for (const block of kinds('go', 'fragment')) {
      const p = run('gofmt', ['-e']);
      p.child.stdin!.end(block.code);
      await expect(p, block.where).resolves.toBeDefined();
    }
    for (const block of kinds('json')) expect(() => JSON.parse(block.code), block.where).not.toThrow();
  });
});

describe('documentation links', () => {
  it('every relative link names a file of the repository, and every #anchor a heading of its target', () => {
    const broken: string[] = [];
    for (const file of documentationFiles(root)) {
      const text = readFileSync(join(root, file), 'utf8');
      for (const [, target] of withoutCode(text).matchAll(/\]\(([^)\s]+)\)/g)) {
        if (/^(https?|mailto):/.test(target!)) continue;
        const [path = '', anchor] = target!.split('#');
        const resolved = path === '' ? file : join(dirname(file), path);
        if (!existsSync(join(root, resolved))) {
          broken.push(`${file}: (${target}): no ${resolved}`);
          continue;
        }
        if (anchor !== undefined && resolved.endsWith('.md') && !headingSlugs(readFileSync(join(root, resolved), 'utf8')).has(anchor)) {
          broken.push(`${file}: (${target}): no heading #${anchor} in ${resolved}`);
        }
      }
    }
    expect(broken).toEqual([]);
  });
});

/** A markdown text without its fenced code blocks (their brackets are not links). */
function withoutCode(text: string): string {
  return text.replace(/^\s*```[^]*?^\s*```\s*$/gm, '');
}

/** The anchors GitHub gives a document's headings: lower case, punctuation dropped, spaces as hyphens. */
function headingSlugs(text: string): Set<string> {
  const slugs = new Set<string>();
  for (const [, heading] of withoutCode(text).matchAll(/^#{1,6}\s+(.+)$/gm)) {
    slugs.add(heading!.trim().toLowerCase().replace(/[^\p{L}\p{N} _-]/gu, '').replace(/ /g, '-'));
  }
  return slugs;
}

/** An expected output as a pattern: `<n>` stands for a number (a token), the rest is literal. */
function outputPattern(output: string): RegExp {
  return new RegExp(`^${output.split('<n>').map((s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('\\d+')}$`);
}

describe('the API reference', () => {
  it('TypeDoc builds it from the declarations without a warning, and every public function and method has an @example', async () => {
    const out = join(scratch, 'reference');
    const typedoc = join(root, 'node_modules', 'typedoc', 'bin', 'typedoc');
    // typedoc.json: treatWarningsAsErrors, validation on; a warning fails the run.
    const result = await run(process.execPath, [typedoc, '--out', out, '--json', join(out, 'api.json')], { cwd: root, maxBuffer: 1 << 24 }).then(
      () => ({ code: 0, said: '' }),
      (e: { stdout: string; stderr: string; code: number }) => ({ code: e.code, said: `${e.stdout}${e.stderr}` }),
    );
    expect(result).toEqual({ code: 0, said: '' });
    const missing: string[] = [];
    const tagged = (r: Reflection) => [r.comment, ...(r.signatures ?? []).map((s) => s.comment)].some((c) => c?.blockTags?.some((t) => t.tag === '@example'));
    const visit = (r: Reflection, path: string, parentTagged: boolean) => {
      const here = path ? `${path}.${r.name}` : r.name;
      const callable = r.kind === FUNCTION || r.kind === METHOD;
      // Interfaces the caller implements (a logger, a meter, a PgBoss): one example on the interface.
      if (callable && !r.inheritedFrom && !tagged(r) && !(parentTagged && CALLER_IMPLEMENTS.has(path.split('.').at(-1)!))) missing.push(here);
      for (const child of r.children ?? []) visit(child, here, tagged(r));
    };
    visit(JSON.parse(await readFile(join(out, 'api.json'), 'utf8')) as Reflection, '', false);
    expect(missing).toEqual([]);
  }, 300_000);
});

interface Reflection {
  name: string;
  kind: number;
  inheritedFrom?: unknown;
  comment?: { blockTags?: { tag: string }[] };
  signatures?: { comment?: { blockTags?: { tag: string }[] } }[];
  children?: Reflection[];
}
const FUNCTION = 64;
const METHOD = 2048;
/** Interfaces whose methods pgfence calls and the caller provides. */
const CALLER_IMPLEMENTS = new Set(['Logger', 'Meter', 'BossLike', 'PgfenceMigration', 'PgfenceMigrationProvider']);

describe('npm start', () => {
  it('says what it does before it builds (the build takes seconds)', async () => {
    const { stdout } = await run('npm', ['start', '--silent', '--', '--help'], { cwd: root, timeout: 120_000 });
    expect(stdout.split('\n')[0]).toMatch(/^pgfence demo: building pgfence first/);
    expect(stdout).toContain('pgfence demo');
  }, 180_000);
});
