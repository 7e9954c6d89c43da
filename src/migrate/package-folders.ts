import { fileURLToPath } from 'node:url';
import type { MigrationFolders } from './files.js';

/**
 * pgfence's own migrations/ and sql/ folders, at the package root. The build compiles
 * src/migrate/*.ts to dist/migrate/*.js, so from either the root is two levels up.
 */
export function packageFolders(moduleUrl: string = import.meta.url): MigrationFolders {
  return {
    migrationsDir: fileURLToPath(new URL('../../migrations', moduleUrl)),
    sqlDir: fileURLToPath(new URL('../../sql', moduleUrl)),
  };
}
