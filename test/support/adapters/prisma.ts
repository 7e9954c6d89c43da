import { PrismaPg } from '@prisma/adapter-pg';
import * as p from '../../../src/adapters/prisma/index.js';
import type { PrismaClient } from '../../fixtures/prisma/generated/client.js';
import type { AdapterUnderTest } from './adapter.js';
import { installed } from './node-postgres-kysely.js';
import { importPrismaClient } from './prisma-client.js';

/** The generated client of test/fixtures/prisma/schema.prisma (its ConformanceItem model maps conformance_items). */
type Client = PrismaClient;
type Tx = Parameters<Parameters<Client['$transaction']>[0]>[0];

/**
 * Prisma ends an interactive transaction after its `timeout` (5000 ms by default) and makes a caller wait
 * at most `maxWait` for a connection: the suite's waits run longer, as an application's would be allowed to.
 */
const TRANSACTION_OPTIONS = { timeout: 120_000, maxWait: 60_000 };

/** pgfence/prisma on the `tx` of prisma.$transaction(async (tx) => ...), Prisma 7 over @prisma/adapter-pg. */
const prisma: AdapterUnderTest = {
  name: 'prisma',
  library: () => `${installed('@prisma/client')} (${installed('@prisma/adapter-pg')})`,
  async open(url) {
    const { PrismaClient } = await importPrismaClient<{ PrismaClient: new (options: { adapter: PrismaPg }) => Client }>();
    const client = new PrismaClient({ adapter: new PrismaPg({ connectionString: url, max: 4 }) });
    return {
      transaction: (fn) => client.$transaction((tx) => fn(tx), TRANSACTION_OPTIONS),
      outside: () => client,
      xactLock: (tx, name, opts) => p.xactLock(tx as Tx, name, opts),
      tryXactLock: (tx, name, opts) => p.tryXactLock(tx as Tx, name, opts),
      xactLockUnchecked: (tx, name, opts) => p.xactLock(tx as Tx, name as string, opts as never),
      fencedUpdate: (tx, s) => p.fencedUpdate(tx as Tx, { model: 'ConformanceItem', ...s }),
      async fencedClaim(tx, s) {
        const { rows, ...rest } = await p.fencedClaim(tx as Tx, { model: 'ConformanceItem', ...s });
        return { ...rest, n: rows.map((r) => r.n) };
      },
      versionedUpdate: (tx, s) => p.versionedUpdate(tx as Tx, { model: 'ConformanceItem', ...s }),
      async execute(tx, text) {
        await (tx as Tx).$executeRawUnsafe(text);
      },
      close: () => client.$disconnect(),
    };
  },
};

/** The conformance drivers of pgfence/prisma. */
export const adapters: AdapterUnderTest[] = [prisma];
