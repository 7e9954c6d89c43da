// pgfence/prisma: the entry point (no logic: the adapter's public surface is api.ts).
export * from './api.js';
