import { defineConfig } from 'vitest/config';

// The Patroni suite (`npm run test:ha`): its own etcd and PostgreSQL nodes, no shared test server.
export default defineConfig({
  test: {
    include: ['test/ha/**/*.ha.ts'],
    pool: 'forks',
    testTimeout: 240_000,
    hookTimeout: 180_000,
    reporters: ['default'],
  },
});
