import { BaseHandle } from '../core/index.js';

/** Several locks taken together (acquireAll): held while all are held, lost when any is lost. */
export class CompositeLockHandle extends BaseHandle {
  constructor(
    readonly handles: readonly BaseHandle[],
    /** Gives the members back all at once; resolves true when every one was still held. */
    private readonly releaseAll: () => Promise<boolean>,
  ) {
    // Identified by its first key in canonical order; the members carry their own names and keys.
    super('lock', null, handles[0]!.key, handles[0]!.mode, null);
    // A loss hook rather than a listener on each member's signal: thousands of members stay cheap.
    const onLoss = (err: Parameters<NonNullable<BaseHandle['onLoss']>>[0]) => {
      if (!this.markLost(err)) return;
      // The rest are useless without the lost one: give them back.
      void this.releaseAll();
    };
    for (const h of handles) h.onLoss = onLoss;
  }

  get keys(): bigint[] {
    return this.handles.map((h) => h.key);
  }

  protected doRelease(): Promise<boolean> {
    this.markReleased();
    return this.releaseAll();
  }
}
