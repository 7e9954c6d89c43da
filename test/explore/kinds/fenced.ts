/** Fenced session locks (exclusive, a token per grant) on a pgfence locker. */
import { handleHold, type KindAdapter, lockerKind, SESSION_SCOPED } from './kind.js';

export const fenced: KindAdapter = {
  kind: 'fenced',
  turn: 'lost-to-lease',
  family: 'session',
  modes: ['exclusive'],
  supports: { try: true, abort: true, renew: false },
  tokens: true,
  ...SESSION_SCOPED,
  open: lockerKind(async (locker, { name, timeoutMs, signal }) => {
    const handle = timeoutMs === null ? await locker.tryAcquire(name, { fencing: true, signal }) : await locker.acquire(name, { fencing: true, timeoutMs, signal });
    return handle && handleHold(handle);
  }),
};
