import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { PgfenceError } from '../core/index.js';
import { sha256Hex, type DefinitionFile, type MigrationFile } from './files.js';

/**
 * How the repeatable sql/ definitions appear to Kysely's Migrator, which knows only migrations that
 * run once under a fixed name.
 *
 * The definitions are one migration whose name carries a short checksum of the whole set, so a
 * changed set is a new, pending migration. Kysely then needs two things:
 * - every name it has ever run must still be offered (else "previously executed migration ... is
 *   missing", whatever the options): earlier names come from a log in sql/, offered as no-ops;
 * - names must sort in the order they appeared (else allowUnorderedMigrations would be needed): a
 *   name starts with the last versioned migration's number and a revision, e.g.
 *   `0001~definitions-r0002-3f9a2c1d` sorts after 0001_schema and before 0002_anything
 *   ('_' < '~' both in code units and in locale order).
 */

/** Names under which the definitions were published before, oldest first; kept forever. */
export const DEFINITION_LOG_FILE = 'kysely-definition-migrations.txt';

const LOGGED_NAME = /^(\d{4})~definitions-r(\d{4})-([0-9a-f]{8})$/;

interface DefinitionMigrationPlan {
  /** Earlier names: no-ops now (the current migration applies whatever changed). */
  readonly superseded: readonly string[];
  /** The migration that applies the current definitions; null when sql/ has none. */
  readonly current: string | null;
}

/** A short checksum of the whole definition set: any file added, removed, renamed or edited changes it. */
function definitionSetChecksum(definitions: readonly DefinitionFile[]): string {
  return sha256Hex(definitions.map((d) => `${d.fileName}\0${d.checksum}\n`).join('')).slice(0, 8);
}

export function planDefinitionMigrations(
  log: readonly string[],
  definitions: readonly DefinitionFile[],
  migrations: readonly MigrationFile[],
): DefinitionMigrationPlan {
  if (definitions.length === 0) return { superseded: log, current: null };
  const checksum = definitionSetChecksum(definitions);
  const last = log.at(-1);
  if (last !== undefined && last.endsWith(`-${checksum}`)) return { superseded: log.slice(0, -1), current: last };
  const lastVersion = migrations.at(-1)?.version ?? 0;
  const current = `${String(lastVersion).padStart(4, '0')}~definitions-r${String(log.length + 1).padStart(4, '0')}-${checksum}`;
  return { superseded: log, current };
}

/** The log's names (one a line; # comments and blank lines skipped), checked for shape and order. */
export async function readDefinitionLog(sqlDir: string): Promise<string[]> {
  let text: string;
  try {
    text = await readFile(join(sqlDir, DEFINITION_LOG_FILE), 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw new PgfenceError('PGFENCE_MIGRATION_INVALID', `cannot read sql/${DEFINITION_LOG_FILE}: ${(err as Error).message}`, { cause: err });
  }
  const names = text
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#'));
  names.forEach((name, i) => {
    const match = LOGGED_NAME.exec(name);
    if (!match || Number(match[2]) !== i + 1) {
      throw new PgfenceError(
        'PGFENCE_MIGRATION_INVALID',
        `sql/${DEFINITION_LOG_FILE}, entry ${i + 1} ("${name}"): expected NNNN~definitions-r${String(i + 1).padStart(4, '0')}-<8 hex digits>`,
      );
    }
  });
  return names;
}
