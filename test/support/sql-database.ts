import pg from 'pg';
import { afterAll, beforeAll } from 'vitest';
import { createLocker, type Locker } from '../../src/index.js';
import { track, useMigratedDatabase } from './db.js';

/**
 * A test file's migrated database, used as SQL clients use it: `pool` (ended after the file), `one`
 * for the first row of a statement, and `open()` for a Node locker on the same database.
 */
export function useSqlDatabase(label: string) {
  const db = {
    url: '',
    pool: null as unknown as pg.Pool,
    one: async <T = Record<string, unknown>>(text: string, values: unknown[] = []): Promise<T> => (await db.pool.query(text, values)).rows[0] as T,
    open: (): Locker => track(createLocker({ connectionString: db.url })),
  };
  beforeAll(async () => {
    db.url = (await useMigratedDatabase(label)).url;
    db.pool = new pg.Pool({ connectionString: db.url, max: 4 });
  });
  afterAll(async () => {
    await db.pool.end();
  });
  return db;
}
