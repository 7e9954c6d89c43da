import type { AdapterUnderTest } from './adapter.js';
import { adapters as drizzle } from './drizzle.js';
import { adapters as knex } from './knex.js';
import { adapters as baseline } from './node-postgres-kysely.js';
import { adapters as postgres } from './postgres.js';
import { adapters as prisma } from './prisma.js';
import { adapters as typeorm } from './typeorm.js';

/**
 * Every adapter the conformance suite runs over. PGFENCE_ADAPTERS=name,name (substrings of their names)
 * narrows a local run; CI runs them all.
 */
export function adaptersUnderTest(): AdapterUnderTest[] {
  const all = [...baseline, ...postgres, ...prisma, ...drizzle, ...typeorm, ...knex];
  const only = process.env.PGFENCE_ADAPTERS?.split(',').filter(Boolean);
  return only ? all.filter((a) => only.some((o) => a.name.includes(o))) : all;
}
