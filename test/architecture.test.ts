import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { importCycles, importGraph } from './support/import-graph.js';

// The layout promises of docs/ARCHITECTURE.md, checked on the source itself.
const SRC = join(import.meta.dirname, '..', 'src');
/** A literal that starts like a statement (or a script's first keyword). */
const SQL_START = /^\s*(SELECT|INSERT|UPDATE|DELETE|WITH|SET|RESET|SHOW|LISTEN|UNLISTEN|NOTIFY|BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE SAVEPOINT|CREATE|DROP|ALTER|DO|LOCK TABLE|DECLARE)(\s|$)/;
/**
 * The tools build statements that are not pgfence's own: the bench times bare clients and peers, the
 * demo creates its story's table. The rule is about the library's statements.
 */
const TOOLS = ['bench/', 'cli/demo/'];

/** The string and template literals of a source file that read as SQL, with their lines. */
function sqlLiterals(file: string): string[] {
  const source = ts.createSourceFile(file, readFileSync(join(SRC, file), 'utf8'), ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const visit = (node: ts.Node): void => {
    const text = ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node) ? node.text : ts.isTemplateExpression(node) ? node.head.text : null;
    // A lone keyword is a word, not a statement ('WITH' naming a builder's clause in a message).
    if (text !== null && SQL_START.test(text) && /\S\s+\S/.test(text) && !ts.isImportDeclaration(node.parent) && !ts.isExportDeclaration(node.parent)) {
      found.push(`${file}:${source.getLineAndCharacterOfPosition(node.getStart()).line + 1}: ${text.trim().split('\n')[0]!.slice(0, 60)}`);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

/** Every .ts file under src/, relative to it. */
function sourceFiles(dir = ''): string[] {
  return readdirSync(join(SRC, dir)).flatMap((entry) => {
    const rel = dir ? `${dir}/${entry}` : entry;
    return statSync(join(SRC, rel)).isDirectory() ? sourceFiles(rel) : rel.endsWith('.ts') ? [rel] : [];
  });
}

/** The folders under src/: each is an area (session, advisory, lease, wait, fencing, observe, core, ...). */
const areas = new Set(readdirSync(SRC).filter((entry) => statSync(join(SRC, entry)).isDirectory()));
const areaOf = (file: string): string | null => {
  const first = file.split('/')[0]!;
  return file.includes('/') && areas.has(first) ? first : null;
};

describe('architecture', () => {
  it('has no import cycle in src/ (type-only imports included)', () => {
    expect(importCycles(SRC)).toEqual([]);
  });

  // A module holds one concept, whatever its length (no line limit: a limit shaped boundaries by the
  // count, not the concept). What is checked instead is where the kinds of code that must stay
  // reviewable in one place live: SQL, and the stateful core's state.
  it('keeps SQL text in the *-sql.ts module of its area (sql/ and migrations/ hold the schema)', () => {
    const outside = sourceFiles()
      .filter((f) => !f.endsWith('-sql.ts') && !TOOLS.some((tool) => f.startsWith(tool)))
      .flatMap(sqlLiterals);
    expect(outside).toEqual([]);
  });

  it('changes the state of the wait line, a waiter and a session in one transition function each', () => {
    for (const [file, field] of [
      ['wait/wait-line.ts', 'state'],
      ['wait/waiter.ts', 'current'],
      ['session/session.ts', 'current'],
    ] as const) {
      const text = readFileSync(join(SRC, file), 'utf8');
      const assignments = [...text.matchAll(new RegExp(`this\\.${field} = `, 'g'))];
      expect(assignments.length, `${file}: this.${field} is assigned in its move() only`).toBe(1);
      expect(text).toMatch(new RegExp(`this\\.${field} = \\w+_STATES\\.transition\\(`));
    }
  });

  it("reaches another area only through that area's index", () => {
    const reaching: string[] = [];
    for (const [file, targets] of importGraph(SRC)) {
      for (const target of targets) {
        const area = areaOf(target);
        if (area && area !== areaOf(file) && target !== `${area}/index.ts`) reaching.push(`${file} -> ${target}`);
      }
    }
    expect(reaching).toEqual([]);
  });

  it('keeps the data path one way: session knows no lock kind, wait knows no kind either, core knows no area, the bench no CLI', () => {
    // keys -> session -> advisory | lease -> fencing -> observe; wait is the mechanism the kinds plug into.
    const forbidden: Record<string, string[]> = {
      core: [...areas].filter((a) => a !== 'core'),
      session: ['advisory', 'lease', 'wait', 'fencing', 'adapters', 'pg-boss', 'cli', 'bench', 'migrate'],
      wait: ['advisory', 'lease', 'adapters', 'pg-boss', 'cli', 'bench'],
      fencing: ['advisory', 'lease', 'wait', 'session', 'adapters', 'pg-boss', 'cli', 'bench'],
      // Tools side by side: what the bench and the CLI both need lives below them (core, session).
      bench: ['cli'],
    };
    const wrong: string[] = [];
    for (const [file, targets] of importGraph(SRC)) {
      const from = areaOf(file);
      for (const target of targets) {
        const to = areaOf(target) ?? target;
        if (from && forbidden[from]?.includes(to)) wrong.push(`${file} -> ${target}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it("imports no package entry point except from another entry point (they are bundled, the rest is tsc's per-file output)", () => {
    // scripts/build.mjs replaces dist/index.js, dist/adapters/kysely/index.js and dist/pg-boss/index.js with
    // bundles; a per-file module (the CLI, the demo's worker) importing one would run the bundle's
    // copy of every class beside its own, and instanceof would fail across the two.
    const manifest = JSON.parse(readFileSync(join(SRC, '..', 'package.json'), 'utf8')) as { exports: Record<string, string | { default: string }> };
    const entries = Object.values(manifest.exports)
      .map((target) => (typeof target === 'string' ? target : target.default))
      .filter((target) => target.startsWith('./dist/') && target.endsWith('.js'))
      .map((target) => target.replace(/^\.\/dist\//, '').replace(/\.js$/, '.ts'));
    expect(entries).toEqual(['index.ts', ...['kysely', 'postgres', 'prisma', 'drizzle', 'typeorm', 'knex'].map((a) => `adapters/${a}/index.ts`), 'pg-boss/index.ts']);
    const wrong: string[] = [];
    for (const [file, targets] of importGraph(SRC)) {
      for (const target of targets) if (entries.includes(target) && !entries.includes(file)) wrong.push(`${file} -> ${target}`);
    }
    expect(wrong).toEqual([]);
  });

  it('says why wherever it drops a rejection (.catch(() => {})): on that line or in the comment just above', () => {
    const silent: string[] = [];
    for (const file of readdirSync(SRC, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.ts'))) {
      const lines = readFileSync(join(SRC, file), 'utf8').split('\n');
      lines.forEach((line, i) => {
        if (!/\.catch\(\(\) => (\{\}|false|null|undefined)\)/.test(line) || line.includes('//')) return;
        let above = i - 1;
        while (above >= 0 && lines[above]!.trim() === '') above--;
        if (!/^\s*(\/\/|\*|\/\*)/.test(lines[above] ?? '')) silent.push(`${file}:${i + 1}`);
      });
    }
    expect(silent).toEqual([]);
  });
});
