// `npm run bench [-- --quick --only=3]`: pgfence bench (src/bench/) on DATABASE_URL, else the local test database.
import { run } from '../dist/cli/bench.js';
process.env.DATABASE_URL ||= 'postgres://postgres@127.0.0.1:5432/test';
process.exitCode = await run(['--migrate', ...process.argv.slice(2)]);
