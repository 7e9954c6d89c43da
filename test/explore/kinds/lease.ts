/** Table-backed leases on a pgfence locker: a token per grant, renewal, expiry on the database clock. */
import { handleHold, type KindAdapter, LEASE_SCOPED, lockerKind } from './kind.js';

export const lease: KindAdapter = {
  kind: 'lease',
  turn: 'lost-to-lease',
  family: 'lease',
  modes: ['exclusive'],
  supports: { try: true, abort: true, renew: true },
  tokens: true,
  ...LEASE_SCOPED,
  open: lockerKind(async (locker, { name, timeoutMs, signal }, ctx) => {
    const opts = { ttlMs: ctx.leaseTtlMs, owner: ctx.owner };
    const handle = timeoutMs === null ? await locker.tryLease(name, { ...opts, signal }) : await locker.lease(name, { ...opts, timeoutMs, signal });
    return handle && handleHold(handle, { renew: () => handle.renew() });
  }),
};
