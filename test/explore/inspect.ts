/**
 * What the database holds for an actor, looked up by its application_name (advisory locks of its
 * backends, markers included) and its lease owner (live lease rows): checked when the actor believes
 * it holds nothing (idle, with nothing in flight) and after its close.
 */
import { sleep } from '../support/db.js';
import type { HeldObservation } from './history.js';
import { now } from './history.js';
import type { Actor, World } from './world.js';

/** Advisory locks as "key/1" (a lock key) or "hi:lo/2" (a marker's int4 pair, as the oids pg_locks shows). */
const ADVISORY_SQL = `
  SELECT CASE WHEN l.objsubid = 1 THEN ((l.classid::int8 << 32) | l.objid::int8)::text
              ELSE l.classid::text || ':' || l.objid::text END
         || '/' || l.objsubid || CASE WHEN l.granted THEN '' ELSE ' (waiting)' END AS lock
    FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
   WHERE a.application_name = $1 AND l.locktype = 'advisory'
   ORDER BY 1`;
const LEASES_SQL = `SELECT token::text FROM pgfence.leases WHERE owner = $1 AND released_at IS NULL AND expires_at > clock_timestamp()`;

type Held = Pick<HeldObservation, 'advisory' | 'leases'>;
/** An actor incarnation as it was when it closed (the slot may have a new one by the time it is checked). */
export interface Closed {
  id: string;
  kind: string;
  appName: string;
  owner: string;
}

/** What the database holds for the actor; leases its holders saw lost may still be live (their deadline passes first) and are left out. */
export async function heldFor(world: World, actor: { id: string; appName: string; owner: string }): Promise<Held> {
  const [advisory, leases] = await Promise.all([
    world.admin.query<{ lock: string }>(ADVISORY_SQL, [actor.appName]),
    world.admin.query<{ token: string }>(LEASES_SQL, [actor.owner]),
  ]);
  const lost = new Set<string>();
  for (const hold of world.recorder.holds.values()) if (hold.actor === actor.id && hold.end === 'lost' && hold.token !== null) lost.add(String(hold.token));
  return { advisory: advisory.rows.map((r) => r.lock), leases: leases.rows.map((r) => r.token).filter((t) => !lost.has(t)) };
}

const empty = (h: Held) => h.advisory.length === 0 && h.leases.length === 0;

/** An idle actor holds nothing on the server: recorded when it does. */
export async function checkIdle(world: World, actor: Actor): Promise<boolean> {
  const held = await heldFor(world, actor);
  if (empty(held)) return true;
  world.recorder.held.push({ actor: actor.id, kind: actor.kind.kind, at: now(), afterClose: false, ...held });
  return false;
}

/**
 * Right after close() resolved: nothing held, nothing announced. When something is, how long until it
 * goes (bounded by waitMs) is recorded with it: the checker decides what is allowed.
 */
export async function checkAfterClose(world: World, actor: Closed, waitMs: number): Promise<boolean> {
  const start = now();
  const first = await heldFor(world, actor);
  if (empty(first)) return true;
  const observation: HeldObservation = { actor: actor.id, kind: actor.kind, at: start, afterClose: true, ...first };
  while (now() - start < waitMs) {
    await sleep(20);
    if (empty(await heldFor(world, actor))) {
      observation.clearAfterMs = now() - start;
      break;
    }
  }
  world.recorder.held.push(observation);
  return false;
}
