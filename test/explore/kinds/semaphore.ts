/** Advisory semaphore permits on a pgfence locker: at most `permits` holders of a semaphore name. */
import { actorLocker, detectionBoundMs, handleHold, type KindAdapter } from './kind.js';

export const semaphore: KindAdapter = {
  kind: 'semaphore',
  family: 'permit',
  modes: ['exclusive'],
  supports: { try: true, abort: true, renew: false },
  tokens: false,
  lossWindowMs: detectionBoundMs,
  destroyedBy: ['backend-kill', 'restart'],
  open: async (ctx) => {
    const locker = actorLocker(ctx);
    return {
      acquire: async ({ name, timeoutMs, signal, started }) => {
        started();
        const sem = locker.semaphore(name, { permits: ctx.permits[name] ?? 1 });
        const handle = timeoutMs === null ? await sem.tryAcquire({ signal }) : await sem.acquire({ timeoutMs, signal });
        return handle && handleHold(handle);
      },
      close: () => locker.close(),
    };
  },
};
