import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/support/global-setup.ts'],
    // A pg 9 deprecation warning fails the file that caused it.
    setupFiles: ['test/support/no-pg-deprecations.ts'],
    // Child processes, not threads: fault tests send signals and kill sockets.
    pool: 'forks',
    // Two files at a time: the shared server allows 100 connections, and each file opens a few dozen at most.
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // .ci/run also asks for the JSON report, from which scripts/adapter-matrix.mjs prints the adapters' matrix.
    reporters: process.env.PGFENCE_TEST_JSON ? ['default', ['json', { outputFile: process.env.PGFENCE_TEST_JSON }]] : ['default'],
  },
});
