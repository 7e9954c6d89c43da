interface Waiter {
  check: () => boolean;
  resolve: () => void;
  reject: (err: Error) => void;
}

/**
 * Waits for conditions over the demo's state: each is checked again whenever something happened
 * (`poke`), and the first failure rejects every wait, present and future.
 */
export class ConditionWaits {
  private readonly waiters = new Set<Waiter>();
  private failure: Error | null = null;

  waitFor(check: () => boolean, timeoutMs: number, what: string): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    if (check()) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters.delete(waiter);
        reject(new Error(`the demo timed out waiting for ${what}`));
      }, timeoutMs);
      const waiter: Waiter = {
        check,
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
        reject: (err) => {
          clearTimeout(timer);
          reject(err);
        },
      };
      this.waiters.add(waiter);
    });
  }

  poke(): void {
    for (const w of [...this.waiters]) {
      if (w.check()) {
        this.waiters.delete(w);
        w.resolve();
      }
    }
  }

  fail(err: Error): void {
    if (this.failure) return;
    this.failure = err;
    for (const w of [...this.waiters]) {
      this.waiters.delete(w);
      w.reject(err);
    }
  }
}
