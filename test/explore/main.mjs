// `npm run test:explore -- --seed N --minutes M [--save DIR]`: the exploration test (test/explore.test.ts)
// for M minutes (default 10) of rounds from seed N on (default: a random one), each round's seed printed.
// --save DIR writes each round's history there (explore-<seed>.json).
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: { seed: { type: 'string' }, minutes: { type: 'string', default: '10' }, save: { type: 'string' } },
});
const env = { ...process.env, PGFENCE_EXPLORE_MINUTES: values.minutes };
if (values.seed !== undefined) env.PGFENCE_EXPLORE_SEED = values.seed;
if (values.save !== undefined) env.PGFENCE_EXPLORE_SAVE = values.save;
for (const [name, value] of [['--seed', values.seed], ['--minutes', values.minutes]]) {
  if (value !== undefined && !/^-?\d+(\.\d+)?$/.test(value)) {
    console.error(`${name} takes a number, got ${value}`);
    process.exit(2);
  }
}
const vitest = fileURLToPath(new URL('../../node_modules/vitest/vitest.mjs', import.meta.url));
const child = spawn(process.execPath, [vitest, 'run', 'test/explore.test.ts'], { env, stdio: 'inherit' });
child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
