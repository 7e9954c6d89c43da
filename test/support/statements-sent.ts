import pg from 'pg';

/** The text of every statement any pg client of this process sends while `fn` runs. */
export async function statementsSent(fn: () => Promise<unknown>): Promise<string[]> {
  const query = pg.Client.prototype.query;
  const sent: string[] = [];
  pg.Client.prototype.query = function recorded(this: pg.Client, ...args: unknown[]) {
    const first = args[0] as string | { text: string };
    sent.push(typeof first === 'string' ? first : first.text);
    return (query as (...a: unknown[]) => unknown).apply(this, args);
  } as typeof query;
  try {
    await fn();
  } finally {
    pg.Client.prototype.query = query;
  }
  return sent;
}
