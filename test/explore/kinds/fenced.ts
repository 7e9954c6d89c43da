/** Fenced session locks (exclusive, a token per grant) on a pgfence locker. */
import { actorLocker, detectionBoundMs, handleHold, type KindAdapter } from './kind.js';

export const fenced: KindAdapter = {
  kind: 'fenced',
  family: 'session',
  modes: ['exclusive'],
  supports: { try: true, abort: true, renew: false },
  tokens: true,
  lossWindowMs: detectionBoundMs,
  destroyedBy: ['backend-kill', 'restart'],
  open: async (ctx) => {
    const locker = actorLocker(ctx);
    return {
      acquire: async ({ name, timeoutMs, signal, started }) => {
        started();
        const handle =
          timeoutMs === null ? await locker.tryAcquire(name, { fencing: true, signal }) : await locker.acquire(name, { fencing: true, timeoutMs, signal });
        return handle && handleHold(handle);
      },
      close: () => locker.close(),
    };
  },
};
