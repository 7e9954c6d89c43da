import { fileURLToPath } from 'node:url';
import type { MigrationFolders } from './files.js';

/**
 * pgfence's own migrations/ and sql/ folders, at the package root. The build compiles
 * src/migrate/*.ts to dist/migrate/*.js and bundles this module into dist/chunks/ (scripts/build.mjs
 * checks that the paths still resolve), so from each the root is two levels up.
 */
export function packageFolders(moduleUrl: string = import.meta.url): MigrationFolders {
  return {
    migrationsDir: fileURLToPath(new URL('../../migrations', moduleUrl)),
    sqlDir: fileURLToPath(new URL('../../sql', moduleUrl)),
  };
}
