// A worker of the Patroni suite: takes the lease 'ha:lease' or the fenced lock 'ha:lock' in turn,
// claims its row with the token before reading it (fencedClaim: a read-modify-write is safe only so),
// increments it through fencedUpdate and, unfenced, the control row; sometimes pauses between
// read and write (a GC pause; its lease is not renewed) so its grant can lapse. One JSON line per write on stdout; it runs until
// stdin closes. argv: connection string (several hosts), worker id.
import pg from 'pg';
import { createLocker, fencedClaim, fencedUpdate } from '../../dist/index.js';

const [url, id] = process.argv.slice(2);
const locker = createLocker({ connectionString: url, defaultTimeoutMs: 5_000, keepaliveMs: 1_000 });
// Several hosts: the same multi-host pool pgfence uses, for the worker's own writes.
const { openPool } = await import('../../dist/session/multi-host.js');
const pool = openPool(url, { max: 2, connectionTimeoutMillis: 3_000 });
pool.on('error', () => {});
let stopping = false;
process.stdin.on('end', () => (stopping = true));
process.stdin.resume();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const emit = (o) => process.stdout.write(`${JSON.stringify({ id, ...o })}\n`);

for (let i = 0; !stopping; i++) {
  const kind = i % 2 === 0 ? 'lease' : 'lock';
  const row = kind === 'lease' ? 1 : 2;
  let grant;
  try {
    grant = kind === 'lease' ? await locker.lease('ha:lease', { ttlMs: 2_000, renew: false }) : await locker.acquire('ha:lock', { fencing: true });
    const token = grant.token;
    // Claim the row before reading it: a holder whose grant lapsed can then no longer write over a newer one's read.
    const claim = await fencedClaim(pool, { table: 'fenced', where: { id: row }, token });
    if (!claim.claimed) {
      emit({ kind, token: String(token), applied: false, at: Date.now() });
      continue;
    }
    const { rows } = await pool.query('SELECT $2::int AS f, c.value AS c FROM control c WHERE c.id = $1', [row, claim.rows[0].value]);
    // Now and then a pause longer than the lease: its grant lapses, another holder writes meanwhile.
    if (kind === 'lease' && Math.random() < 0.3) await sleep(3_000);
    else await sleep(Math.random() * 20);
    let r;
    try {
      r = await fencedUpdate(pool, { table: 'fenced', set: { value: rows[0].f + 1 }, where: { id: row }, token });
    } catch (err) {
      // The connection died with the write in flight: it may have committed (an ambiguous commit).
      emit({ kind, ambiguous: true, error: String(err?.code ?? err?.message ?? err), at: Date.now() });
      continue;
    }
    // Reported before the control write: a failover may fail that one, and this write's outcome is known already.
    emit({ kind, token: String(token), applied: r.applied, at: Date.now() });
    await pool.query('UPDATE control SET value = $2, writes = writes + 1 WHERE id = $1', [row, rows[0].c + 1]);
  } catch (err) {
    emit({ kind, error: String(err?.code ?? err?.message ?? err), at: Date.now() });
    await sleep(100);
  } finally {
    await grant?.release().catch(() => {});
  }
}
await locker.close();
await pool.end().catch(() => {});
