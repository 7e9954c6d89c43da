/**
 * A child process hosting one actor at a time (started by ./actors.ts through test/support/ts-loader.mjs),
 * so that a fault can stop or kill the holder's whole process. Its records and state go to the parent
 * over IPC as they happen (advanced serialization: bigints cross as they are).
 */
import { ActorHost, type ActorCommand, type ActorState } from './actor.js';
import type { Recorded } from './history.js';
import { kindNamed, type KindContext } from './kinds/index.js';

export type ToChild =
  | { type: 'start'; kind: string; id: string; ctx: KindContext; slackMs: number; actEveryMs: number; writeEvery: number }
  | { type: 'command'; cmd: ActorCommand };
export type FromChild = { type: 'ready' } | { type: 'record'; record: Recorded } | { type: 'state'; id: string; state: ActorState };

let host: ActorHost | null = null;
const send = (msg: FromChild) => process.send?.(msg);

process.on('message', (msg: ToChild) => {
  if (msg.type === 'start') {
    const id = msg.id;
    host = new ActorHost({
      kind: kindNamed(msg.kind),
      id,
      ctx: msg.ctx,
      slackMs: msg.slackMs,
      actEveryMs: msg.actEveryMs,
      writeEvery: msg.writeEvery,
      emit: (record) => send({ type: 'record', record }),
      onState: (state) => send({ type: 'state', id, state }),
    });
    void host.open();
  } else {
    host?.command(msg.cmd);
  }
});
// The parent went away: so does the child.
process.on('disconnect', () => process.exit(0));
// Listening now: what the parent sent before this could have been lost, so it waits for this.
send({ type: 'ready' });
