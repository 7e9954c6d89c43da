export { migrate, type MigrateOptions } from './migrate.js';
export type { MigrateResult } from './runner.js';
// For the Kysely migrations (src/kysely/migrations.ts), which run the same definition sets.
export * from './definition-sets.js';
export * from './files.js';
export * from './history.js';
export * from './lock.js';
export * from './package-folders.js';
// For pgfence's schema as one SQL script (src/adapters/shared/schema-script.ts).
export { createHistoryTablesSql } from './migrate-sql.js';
