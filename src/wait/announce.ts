import { MarkerOp, markerRegistered } from './marker-sql.js';
import type { ReleaseListener, Session, SessionPool } from '../session/index.js';

declare const LISTENING: unique symbol;
/**
 * Proof that the release listener LISTENs. Only listen() makes one, and registerMarker() takes one: a wait is
 * announced in this order, listen first, then the marker, so that no release between the two goes unheard.
 */
export type Listening = { readonly [LISTENING]: true };

const PROOF = {} as Listening;

/** LISTENs for releases (once per home session); null when it cannot (the waiter then relies on its poll). */
export async function listen(listener: ReleaseListener): Promise<Listening | null> {
  return (await listener.ensure()) ? PROOF : null;
}

/** Registers the key's marker on its session: that session, or null when it did not take (the poll still finds the release). */
export async function registerMarker(_listening: Listening, sessions: SessionPool, key: bigint): Promise<Session | null> {
  try {
    const session = sessions.sessionFor(key);
    return markerRegistered(await session.run(MarkerOp.register, key)) ? session : null;
  } catch {
    // Without a marker the poll still finds the release.
    return null;
  }
}
