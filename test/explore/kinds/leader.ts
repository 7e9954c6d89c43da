/**
 * Leader election on a pgfence locker: a term is a lease of the name (its epoch the lease's token).
 * An acquire campaigns until elected or its timeout; a term ends with a demotion (the campaign then
 * resigns, so a term is only ever one the history saw begin) or a resign.
 */
import { type KindAdapter, type KindHold, LEASE_SCOPED, lockerKind, LossNotice } from './kind.js';

export const leader: KindAdapter = {
  kind: 'leader',
  family: 'lease',
  modes: ['exclusive'],
  supports: { try: false, abort: true, renew: false },
  tokens: true,
  ...LEASE_SCOPED,
  open: lockerKind(async (locker, { name, timeoutMs, signal }, ctx) => {
    const election = locker.leader(name, { ttlMs: ctx.leaseTtlMs, owner: ctx.owner });
    const timeout = AbortSignal.timeout(timeoutMs ?? 0);
    let epoch: bigint;
    try {
      epoch = await election.whenElected({ signal: signal ? AbortSignal.any([signal, timeout]) : timeout });
    } catch (err) {
      await election.resign();
      // Our own timeout: not elected in time (the caller's abort reason, or pgfence's error, goes on).
      if (err === timeout.reason) return null;
      throw err;
    }
    const notice = new LossNotice();
    const believe = () => election.isLeader && election.epoch === epoch;
    election.on('demoted', (ev) => {
      if (ev.epoch !== epoch) return;
      notice.fire(ev.reason);
      void election.resign();
    });
    if (!believe()) notice.fire('demoted');
    const hold: KindHold = {
      token: epoch,
      tokenDurable: true,
      believe,
      onLost: (listener) => notice.on(listener),
      // resign() answers nothing: the belief read as it is called says whether the term lasted until then.
      release: async () => {
        const held = believe();
        await election.resign();
        return { released: held };
      },
    };
    return hold;
  }),
};
