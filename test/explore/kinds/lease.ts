/** Table-backed leases on a pgfence locker: a token per grant, renewal, expiry on the database clock. */
import { actorLocker, handleHold, type KindAdapter } from './kind.js';

export const lease: KindAdapter = {
  kind: 'lease',
  family: 'lease',
  modes: ['exclusive'],
  supports: { try: true, abort: true, renew: true },
  tokens: true,
  // The holder's deadline passes before the database lets anyone else in: no window at all.
  lossWindowMs: () => 0,
  // A lease outlives its session and a restart; only its expiry ends it.
  destroyedBy: [],
  open: async (ctx) => {
    const locker = actorLocker(ctx);
    const opts = { ttlMs: ctx.leaseTtlMs, owner: ctx.owner };
    return {
      acquire: async ({ name, timeoutMs, signal, started }) => {
        started();
        const handle = timeoutMs === null ? await locker.tryLease(name, { ...opts, signal }) : await locker.lease(name, { ...opts, timeoutMs, signal });
        return handle && handleHold(handle, { renew: () => handle.renew() });
      },
      close: () => locker.close(),
    };
  },
};
