import { LockLostError } from '../errors.js';
import { BaseHandle, type LockHandle } from './handle.js';

/** Several locks taken together (acquireAll): held while all are held, lost when any is lost. */
export class CompositeLockHandle extends BaseHandle {
  constructor(readonly handles: readonly LockHandle[]) {
    // Identified by its first key in canonical order; the members carry their own names and keys.
    super('lock', null, handles[0]!.key, handles[0]!.mode, null);
    for (const h of handles) {
      h.signal.addEventListener(
        'abort',
        () => {
          const reason = h.signal.reason;
          this.markLost(reason instanceof LockLostError ? reason : new LockLostError(h.name, h.key, 'session-lost', { cause: reason }));
          // The rest are useless without the lost one: give them back.
          void this.releaseMembers();
        },
        { once: true },
      );
    }
  }

  get keys(): bigint[] {
    return this.handles.map((h) => h.key);
  }

  protected async doRelease(): Promise<boolean> {
    this.markReleased();
    const results = await this.releaseMembers();
    return results.every(Boolean);
  }

  private releaseMembers(): Promise<boolean[]> {
    return Promise.all(this.handles.map((h) => h.release()));
  }
}
