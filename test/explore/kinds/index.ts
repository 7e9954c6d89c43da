/** Every kind the exploration drives, by name. A new kind is one module and one line here. */
import { fenced } from './fenced.js';
import type { KindAdapter } from './kind.js';
import { leader } from './leader.js';
import { lease } from './lease.js';
import { semaphore } from './semaphore.js';
import { session } from './session.js';
import { sqlLease, sqlLock, sqlXact } from './sql.js';
import { xactKysely } from './xact-kysely.js';
import { xactPg } from './xact-pg.js';

export const kinds: readonly KindAdapter[] = [session, fenced, xactPg, xactKysely, lease, semaphore, leader, sqlLock, sqlLease, sqlXact];

export function kindNamed(name: string): KindAdapter {
  const kind = kinds.find((k) => k.kind === name);
  if (!kind) throw new Error(`no exploration kind ${name}`);
  return kind;
}

export type { AcquireRequest, KindAdapter, KindContext, KindHold, KindLocker, WriteExecutor, WriteOutcome } from './kind.js';
export { detectionBoundMs } from './kind.js';
