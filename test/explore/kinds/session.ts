/** Session advisory locks, exclusive and shared, on a pgfence locker (no tokens). */
import { actorLocker, detectionBoundMs, handleHold, type KindAdapter } from './kind.js';

export const session: KindAdapter = {
  kind: 'session',
  family: 'session',
  modes: ['exclusive', 'shared'],
  supports: { try: true, abort: true, renew: false },
  tokens: false,
  lossWindowMs: detectionBoundMs,
  destroyedBy: ['backend-kill', 'restart'],
  open: async (ctx) => {
    const locker = actorLocker(ctx);
    return {
      acquire: async ({ name, mode, timeoutMs, signal, started }) => {
        started();
        const handle = timeoutMs === null ? await locker.tryAcquire(name, { mode, signal }) : await locker.acquire(name, { mode, timeoutMs, signal });
        return handle && handleHold(handle);
      },
      close: () => locker.close(),
    };
  },
};
