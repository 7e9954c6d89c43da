// Prints the data-layer adapters' conformance matrix (adapter x test) from a vitest JSON report:
//   node scripts/adapter-matrix.mjs report.json
// test/adapters.test.ts names each describe `adapter (library version)`; a cell is ok, FAIL, skip or
// '-' (the test does not apply: fenced(builder) where the library has no update builder).
import { readFileSync } from 'node:fs';

const report = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const file = report.testResults.find((r) => r.name.endsWith('test/adapters.test.ts'));
if (!file) {
  console.log('adapter matrix: test/adapters.test.ts did not run');
  process.exit(1);
}
const adapters = new Map();
const tests = [];
for (const t of file.assertionResults) {
  const [adapter] = t.ancestorTitles;
  if (!adapter) continue;
  const test = t.title;
  if (!tests.includes(test)) tests.push(test);
  if (!adapters.has(adapter)) adapters.set(adapter, new Map());
  adapters.get(adapter).set(test, t.status === 'passed' ? 'ok' : t.status === 'failed' ? 'FAIL' : 'skip');
}
const width = Math.max(...[...adapters.keys()].map((a) => a.length));
console.log('tests:');
tests.forEach((t, i) => console.log(`  ${String(i + 1).padStart(2)}. ${t}`));
console.log(`${'adapter (library)'.padEnd(width)}  ${tests.map((_, i) => String(i + 1).padStart(4)).join('')}`);
let failed = 0;
for (const [adapter, cells] of adapters) {
  const row = tests.map((t) => (cells.get(t) ?? '-').padStart(4)).join('');
  failed += [...cells.values()].filter((c) => c === 'FAIL').length;
  console.log(`${adapter.padEnd(width)}  ${row}`);
}
console.log(`${adapters.size} adapters, ${tests.length} tests, ${failed} failed`);
