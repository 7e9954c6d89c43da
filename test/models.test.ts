// The protocols' Promela models (models/*.pml; docs/ARCHITECTURE.md, "Models"), checked with spin by
// scripts/spin-models.mjs (`npm run test:models`): each model passes, and each deliberately broken
// variant (spin -DBROKEN=n) yields a counter-example that violates the property the variant breaks.
// No database. Needs spin and gcc (Debian packages spin, gcc); under PGFENCE_REQUIRE_TOPOLOGY_TESTS=1
// (CI) their absence fails the file.
import { describe, expect, it } from 'vitest';
import { capabilityMissing } from './support/capability.js';

/** One check, as scripts/spin-models.mjs reports it. */
interface CheckRow {
  model: string;
  variant: string;
  expected: 'pass' | 'counter-example';
  result: 'pass' | 'counter-example' | 'incomplete' | 'timeout' | 'error';
  ok: boolean;
  errors: number | null;
  statesStored: number | null;
  depth: number | null;
  seconds: number | null;
  cpuSeconds: number | null;
  violation: string | null;
  detail: string;
}
interface Variant {
  broken: number;
  edit: string;
  breaks: RegExp;
}
interface ModelSpec {
  model: string;
  file: string;
  variants: Variant[];
}
/** What the runner exports (a plain .mjs script: typed here). */
interface SpinRunner {
  MODELS: ModelSpec[];
  spinMissing(): Promise<string | null>;
  checkVariant(spec: ModelSpec, variant: Variant | null): Promise<CheckRow>;
  formatTable(rows: CheckRow[]): string;
}

const runner = (await import(new URL('../scripts/spin-models.mjs', import.meta.url).href)) as SpinRunner;
const skipped = capabilityMissing('SPIN MODELS', await runner.spinMissing(), 'they need spin and gcc');

/** Each check takes seconds on two cores; generous for a loaded machine. */
const CHECK_TIMEOUT_MS = 240_000;

const say = (row: CheckRow) => console.log(runner.formatTable([row]).split('\n').at(-1));

describe.skipIf(skipped)('spin models', () => {
  it('cover the three protocols, each with broken variants', () => {
    expect(runner.MODELS.map((m) => m.model)).toEqual(['tokens', 'leases', 'wait-line']);
    for (const spec of runner.MODELS) expect(spec.variants.length, spec.model).toBeGreaterThan(0);
  });

  for (const spec of runner.MODELS) {
    describe(spec.file, () => {
      it('passes: spin finds no error in any reachable state', async () => {
        const row = await runner.checkVariant(spec, null);
        say(row);
        expect(row.result, row.detail).toBe('pass');
        expect(row.errors).toBe(0);
        expect(row.statesStored).toBeGreaterThan(0);
        expect(row.ok).toBe(true);
      }, CHECK_TIMEOUT_MS);

      for (const variant of spec.variants) {
        it(`BROKEN=${variant.broken} (${variant.edit}) yields a counter-example`, async () => {
          const row = await runner.checkVariant(spec, variant);
          say(row);
          expect(row.result, row.detail).toBe('counter-example');
          expect(row.errors).toBeGreaterThanOrEqual(1);
          expect(row.violation ?? '', 'the counter-example breaks the property this variant breaks').toMatch(variant.breaks);
          expect(row.ok).toBe(true);
        }, CHECK_TIMEOUT_MS);
      }
    });
  }
});
