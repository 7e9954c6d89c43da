export { migrate, type MigrateOptions } from './migrate.js';
export type { MigrateResult } from './runner.js';
