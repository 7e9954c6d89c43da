/** Advisory semaphore permits on a pgfence locker: at most `permits` holders of a semaphore name. */
import { handleHold, type KindAdapter, lockerKind, SESSION_SCOPED } from './kind.js';

export const semaphore: KindAdapter = {
  kind: 'semaphore',
  family: 'permit',
  modes: ['exclusive'],
  supports: { try: true, abort: true, renew: false },
  tokens: false,
  ...SESSION_SCOPED,
  open: lockerKind(async (locker, { name, timeoutMs, signal }, ctx) => {
    const sem = locker.semaphore(name, { permits: ctx.permits[name] ?? 1 });
    const handle = timeoutMs === null ? await sem.tryAcquire({ signal }) : await sem.acquire({ timeoutMs, signal });
    return handle && handleHold(handle);
  }),
};
