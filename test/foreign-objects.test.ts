import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../src/index.js';
import * as drizzle from '../src/adapters/drizzle/index.js';
import * as knex from '../src/adapters/knex/index.js';
import * as kysely from '../src/adapters/kysely/index.js';
import * as postgres from '../src/adapters/postgres/index.js';
import * as prisma from '../src/adapters/prisma/index.js';
import * as typeorm from '../src/adapters/typeorm/index.js';

/**
 * An object that only looks like a library's (one method of the right name, or another library's
 * transaction) gets an InvalidArgumentError naming what was expected, before any I/O: never a TypeError
 * from deep inside ("trx.getExecutor is not a function"), never a hang. Also with a bad name: the
 * object is inspected first.
 */
const noop = () => Promise.resolve([]);
const lookAlikes: Record<string, unknown> = {
  'a bare object': {},
  'a Kysely look-alike (executeQuery only)': { executeQuery: noop },
  'a node-postgres look-alike (query only)': { query: noop },
  'a postgres.js look-alike (unsafe only)': { unsafe: noop },
  'a Prisma look-alike ($queryRawUnsafe only)': { $queryRawUnsafe: noop, $executeRawUnsafe: noop },
  'a drizzle look-alike (execute only)': { execute: noop },
  'a Knex look-alike (raw only)': { raw: noop },
  'a function': noop,
};
const locks: Record<string, (trx: unknown, name: unknown) => Promise<unknown>> = {
  'pgfence/kysely': (t, n) => kysely.xactLock(t as never, n as never),
  'pgfence/postgres': (t, n) => postgres.xactLock(t as never, n as never),
  'pgfence/prisma': (t, n) => prisma.xactLock(t as never, n as never),
  'pgfence/drizzle': (t, n) => drizzle.xactLock(t as never, n as never),
  'pgfence/typeorm': (t, n) => typeorm.xactLock(t as never, n as never),
  'pgfence/knex': (t, n) => knex.xactLock(t as never, n as never),
};
const settled = (p: () => Promise<unknown>) => Promise.resolve().then(p).then((v) => v, (e: unknown) => e);

describe('foreign objects', () => {
  for (const [adapter, xactLock] of Object.entries(locks)) {
    it(`${adapter} xactLock: InvalidArgumentError for every look-alike of another library, also with a bad name`, async () => {
      for (const [label, object] of Object.entries(lookAlikes)) {
        for (const name of ['ok', '']) {
          const outcome = await settled(() => xactLock(object, name));
          expect(outcome, `${label}, name ${JSON.stringify(name)}`).toBeInstanceOf(InvalidArgumentError);
          expect((outcome as InvalidArgumentError).argument, `${label}, name ${JSON.stringify(name)}`).not.toBe('name');
        }
      }
    });
  }

  it.each<[string, (b: unknown) => unknown]>([
    ['pgfence/kysely', (b) => kysely.fenced(b as never, 5n).execute()],
    ['pgfence/drizzle', (b) => drizzle.fenced(b as never, 5n).execute()],
    ['pgfence/knex', (b) => knex.fenced(b as never, 5n).execute()],
    ['pgfence/typeorm', (b) => typeorm.fenced(b as never, 5n).execute()],
  ])('%s fenced(): InvalidArgumentError for an object that is not its update builder', async (_adapter, guard) => {
    for (const builder of [{}, { set: noop, where: noop }, { update: noop, where: noop }, { config: {} }, { toSQL: noop }]) {
      const outcome = await settled(async () => guard(builder));
      expect(outcome, JSON.stringify(Object.keys(builder))).toBeInstanceOf(InvalidArgumentError);
    }
  });
});
