import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { importCycles, importGraph, largestFiles } from './support/import-graph.js';

// The layout promises of docs/ARCHITECTURE.md, checked on the source itself.
const SRC = join(import.meta.dirname, '..', 'src');
const MAX_LINES = 400;

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

  it(`keeps every source file under ${MAX_LINES} lines`, () => {
    const over = largestFiles(SRC, 1000).filter(({ lines }) => lines >= MAX_LINES);
    expect(over).toEqual([]);
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
