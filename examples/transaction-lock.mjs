// A lock inside your own transaction, released by COMMIT: here, no two transactions number the same day.
import pg from 'pg';
import { xactLock } from 'pgfence';

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
await pool.query('CREATE TABLE IF NOT EXISTS example_numbers (day date, n int, PRIMARY KEY (day, n))');
await pool.query('DELETE FROM example_numbers WHERE day = current_date');

async function nextNumber() {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await xactLock(client, 'numbering:today', { timeoutMs: 5000 }); // released at COMMIT
    const { rows } = await client.query('SELECT coalesce(max(n), 0) + 1 AS n FROM example_numbers WHERE day = current_date');
    await client.query('INSERT INTO example_numbers VALUES (current_date, $1)', [rows[0].n]);
    await client.query('COMMIT');
    return rows[0].n;
  } catch (err) {
    await client.query('ROLLBACK');
    throw err;
  } finally {
    client.release();
  }
}

const numbers = await Promise.all(Array.from({ length: 10 }, nextNumber));
console.log(`numbers issued: ${numbers.sort((x, y) => x - y).join(',')}`); // 1..10, no duplicates
await pool.end();
