import 'reflect-metadata';
import { DataSource, EntitySchema, type EntityManager } from 'typeorm';
import * as t from '../../../src/adapters/typeorm/index.js';
import type { AdapterClient, AdapterUnderTest } from './adapter.js';
import { installed } from './node-postgres-kysely.js';

/**
 * The conformance table as a TypeORM entity, declared as a user declares one (an EntitySchema: the
 * repository's tsconfig has no experimentalDecorators). Two properties are named apart from their
 * columns (`count` is n, `fencingToken` is fencing_token), so the driver checks the mapping too.
 */
export interface ConformanceItem {
  id: number;
  label: string | null;
  count: number;
  fencingToken: string | null;
  version: string;
}
export const ConformanceItem = new EntitySchema<ConformanceItem>({
  name: 'ConformanceItem',
  tableName: 'conformance_items',
  columns: {
    id: { type: 'int', primary: true },
    label: { type: 'text', nullable: true },
    count: { type: 'int', name: 'n' },
    fencingToken: { type: 'bigint', name: 'fencing_token', nullable: true },
    version: { type: 'bigint' },
  },
});

/** pgfence/typeorm on the EntityManager dataSource.transaction() hands its callback. */
const typeorm: AdapterUnderTest = {
  name: 'typeorm',
  library: () => installed('typeorm'),
  updateBuilder: true,
  async open(url) {
    const dataSource = new DataSource({ type: 'postgres', url, entities: [ConformanceItem], poolSize: 4 });
    await dataSource.initialize();
    const m = (tx: unknown) => tx as EntityManager;
    const client: AdapterClient = {
      transaction: (fn) => dataSource.transaction((manager) => fn(manager)),
      outside: () => dataSource.manager,
      xactLock: (tx, name, opts) => t.xactLock(m(tx), name, opts),
      tryXactLock: (tx, name, opts) => t.tryXactLock(m(tx), name, opts),
      xactLockUnchecked: (tx, name, opts) => t.xactLock(tx as EntityManager, name as string, opts as never),
      fencedUpdate: (tx, s) => t.fencedUpdate(m(tx), { entity: ConformanceItem, set: s.set, where: s.where, token: s.token }),
      async fencedClaim(tx, s) {
        const { rows, ...rest } = await t.fencedClaim(m(tx), { entity: ConformanceItem, where: s.where, token: s.token });
        return { ...rest, n: rows.map((r) => r.count) };
      },
      versionedUpdate: (tx, s) => t.versionedUpdate(m(tx), { entity: ConformanceItem, set: s.set, where: s.where, version: s.version }),
      fencedBuilder: (tx, s) =>
        t.fenced(m(tx).createQueryBuilder().update(ConformanceItem).set({ label: s.set.label }).where('id = :id', { id: s.where.id }), s.token).execute(),
      async execute(tx, text) {
        await m(tx).query(text);
      },
      close: () => dataSource.destroy(),
    };
    return client;
  },
};

export const adapters: AdapterUnderTest[] = [typeorm];
