/** Session advisory locks, exclusive and shared, on a pgfence locker (no tokens). */
import { handleHold, type KindAdapter, lockerKind, SESSION_SCOPED } from './kind.js';

export const session: KindAdapter = {
  kind: 'session',
  turn: 'lost-to-lease',
  family: 'session',
  modes: ['exclusive', 'shared'],
  supports: { try: true, abort: true, renew: false },
  tokens: false,
  ...SESSION_SCOPED,
  open: lockerKind(async (locker, { name, mode, timeoutMs, signal }) => {
    const handle = timeoutMs === null ? await locker.tryAcquire(name, { mode, signal }) : await locker.acquire(name, { mode, timeoutMs, signal });
    return handle && handleHold(handle);
  }),
};
