import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

/**
 * The module graph of a TypeScript source tree, from its relative `import` / `export ... from`
 * specifiers (type-only ones included: a type cycle is still two modules that cannot be read apart).
 * Dynamic `import()` is left out: it is how a cycle is broken on purpose.
 */
export function importGraph(srcDir: string): Map<string, string[]> {
  const root = resolve(srcDir);
  const files = sourceFiles(root);
  const known = new Set(files);
  const graph = new Map<string, string[]>();
  for (const file of files) {
    const text = readFileSync(join(root, file), 'utf8');
    const targets = new Set<string>();
    for (const spec of relativeSpecifiers(text)) {
      const target = resolveSpecifier(root, file, spec, known);
      if (target !== null && target !== file) targets.add(target);
    }
    graph.set(file, [...targets].sort());
  }
  return graph;
}

/**
 * Every import cycle under srcDir, one per strongly connected component (its files, sorted), each
 * given as a path that walks the cycle: ['a.ts', 'b.ts', 'a.ts']. Empty when the graph is acyclic.
 */
export function importCycles(srcDir: string): string[][] {
  const graph = importGraph(srcDir);
  return stronglyConnected(graph)
    .filter((component) => component.length > 1)
    .map((component) => cycleThrough(graph, component))
    .sort((a, b) => a[0]!.localeCompare(b[0]!));
}

/** Source files under srcDir by line count, largest first. */
export function largestFiles(srcDir: string, limit = 10): { file: string; lines: number }[] {
  const root = resolve(srcDir);
  return sourceFiles(root)
    .map((file) => ({ file, lines: readFileSync(join(root, file), 'utf8').split('\n').length - 1 }))
    .sort((a, b) => b.lines - a.lines || a.file.localeCompare(b.file))
    .slice(0, limit);
}

function sourceFiles(root: string, dir = root): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir).sort()) {
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) out.push(...sourceFiles(root, path));
    else if (entry.endsWith('.ts') && !entry.endsWith('.d.ts')) out.push(relative(root, path).split('\\').join('/'));
  }
  return out;
}

// `import x from './a.js'`, `import type { T } from '../b.js'`, `export * from './c.js'`, `import './d.js'`.
const STATIC_SPECIFIER = /(?:^|[;\s])(?:import|export)\s+(?:type\s+)?(?:[^'";]*?\sfrom\s+)?['"](\.{1,2}\/[^'"]+)['"]/g;

function relativeSpecifiers(text: string): string[] {
  const code = text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:'"`])\/\/.*$/gm, '$1');
  return [...code.matchAll(STATIC_SPECIFIER)].map((m) => m[1]!);
}

function resolveSpecifier(root: string, from: string, spec: string, known: Set<string>): string | null {
  const base = relative(root, resolve(root, dirname(from), spec)).split('\\').join('/');
  const stem = base.replace(/\.(?:js|ts|mjs|mts)$/, '');
  for (const candidate of [`${stem}.ts`, `${stem}.mts`, `${base}/index.ts`]) if (known.has(candidate)) return candidate;
  return null;
}

/** Tarjan's algorithm. */
function stronglyConnected(graph: Map<string, string[]>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const components: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, next);
    low.set(v, next);
    next++;
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v)!, index.get(w)!));
      }
    }
    if (low.get(v) === index.get(v)) {
      const component: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      components.push(component.sort());
    }
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return components;
}

/** A shortest cycle from the component's first file back to itself, staying inside the component. */
function cycleThrough(graph: Map<string, string[]>, component: string[]): string[] {
  const inside = new Set(component);
  const start = component[0]!;
  const cameFrom = new Map<string, string>();
  const queue = [start];
  while (queue.length > 0) {
    const v = queue.shift()!;
    for (const w of graph.get(v) ?? []) {
      if (!inside.has(w)) continue;
      if (w === start) {
        const between: string[] = [];
        for (let u: string | undefined = v; u !== undefined && u !== start; u = cameFrom.get(u)) between.unshift(u);
        return [start, ...between, start];
      }
      if (!cameFrom.has(w)) {
        cameFrom.set(w, v);
        queue.push(w);
      }
    }
  }
  return component;
}

// `npx tsx test/support/import-graph.ts [srcDir]` prints the cycles and the largest files.
if (import.meta.url === `file://${process.argv[1]}`) {
  const srcDir = process.argv[2] ?? 'src';
  const cycles = importCycles(srcDir);
  console.log(`${cycles.length} import cycle(s) in ${srcDir}`);
  for (const cycle of cycles) console.log(`  ${cycle.join(' -> ')}`);
  console.log('largest files:');
  for (const { file, lines } of largestFiles(srcDir)) console.log(`  ${String(lines).padStart(5)} ${file}`);
}
