import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { PgfenceError } from '../core/index.js';

/** Where a run reads its files from: pgfence's own folders, or fixtures in tests. */
export interface MigrationFolders {
  /** Versioned migrations, NNNN_name.sql, applied once each in version order. */
  readonly migrationsDir: string;
  /** Repeatable definitions, *.sql, re-applied whenever their checksum changes. May be absent. */
  readonly sqlDir: string;
}

/** One file of migrations/. */
export interface MigrationFile {
  readonly version: number;
  /** The file name, e.g. '0001_schema.sql' (what the history records). */
  readonly fileName: string;
  /** How runs report it: 'migrations/0001_schema.sql'. */
  readonly label: string;
  readonly sql: string;
  /** sha256 (hex) of the file's bytes. */
  readonly checksum: string;
}

/** One file of sql/. */
export interface DefinitionFile {
  /** The file name, e.g. 'fencing.sql' (what the history records). */
  readonly fileName: string;
  /** How runs report it: 'sql/fencing.sql'. */
  readonly label: string;
  readonly sql: string;
  readonly checksum: string;
}

export interface MigrationSet {
  /** In version order. */
  readonly migrations: readonly MigrationFile[];
  /** In file-name order (code-unit order, the same on every machine). */
  readonly definitions: readonly DefinitionFile[];
}

/** NNNN_name.sql: exactly four digits, so that name order is version order everywhere. */
const MIGRATION_FILE_NAME = /^(\d{4})_([A-Za-z0-9][A-Za-z0-9_-]*)\.sql$/;

/** Reads and checks both folders; a bad file name fails here, before any database work. */
export async function readMigrationSet(folders: MigrationFolders): Promise<MigrationSet> {
  const [migrations, definitions] = await Promise.all([readMigrations(folders.migrationsDir), readDefinitions(folders.sqlDir)]);
  return { migrations, definitions };
}

async function readMigrations(dir: string): Promise<MigrationFile[]> {
  const entries = await listFolder(dir, { mustExist: true });
  const files: MigrationFile[] = [];
  for (const entry of entries) {
    if (isIgnored(entry.name)) continue;
    const match = MIGRATION_FILE_NAME.exec(entry.name);
    if (!entry.isFile() || !match) {
      throw new PgfenceError(
        'PGFENCE_MIGRATION_INVALID',
        `migrations/${entry.name} is not a migration file: migrations/ holds only NNNN_name.sql files (four digits, then a name of letters, digits, _ or -)`,
      );
    }
    const version = Number(match[1]);
    if (version < 1) throw new PgfenceError('PGFENCE_MIGRATION_INVALID', `migrations/${entry.name}: versions start at 0001`);
    files.push({ version, fileName: entry.name, label: `migrations/${entry.name}`, ...(await readSqlFile(join(dir, entry.name))) });
  }
  files.sort((a, b) => a.version - b.version);
  for (let i = 1; i < files.length; i++) {
    if (files[i]!.version === files[i - 1]!.version) {
      throw new PgfenceError(
        'PGFENCE_MIGRATION_INVALID',
        `${files[i - 1]!.label} and ${files[i]!.label} have the same version; give the newer one the next free number`,
      );
    }
  }
  return files;
}

async function readDefinitions(dir: string): Promise<DefinitionFile[]> {
  const entries = await listFolder(dir, { mustExist: false });
  const files: DefinitionFile[] = [];
  // Only *.sql files are definitions: sql/ also holds its README and the Kysely definition log.
  for (const entry of entries) {
    if (isIgnored(entry.name) || !entry.isFile() || !entry.name.endsWith('.sql')) continue;
    files.push({ fileName: entry.name, label: `sql/${entry.name}`, ...(await readSqlFile(join(dir, entry.name))) });
  }
  return files.sort((a, b) => (a.fileName < b.fileName ? -1 : a.fileName > b.fileName ? 1 : 0));
}

async function listFolder(dir: string, opts: { mustExist: boolean }) {
  try {
    return await readdir(dir, { withFileTypes: true });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT' && !opts.mustExist) return [];
    throw new PgfenceError('PGFENCE_MIGRATION_INVALID', `cannot read the migrations folder ${dir}: ${(err as Error).message}`, { cause: err });
  }
}

/** Hidden files (.gitkeep, editor files) and READMEs are not migrations. */
function isIgnored(fileName: string): boolean {
  return fileName.startsWith('.') || /^readme(\.md|\.txt)?$/i.test(fileName);
}

async function readSqlFile(path: string): Promise<{ sql: string; checksum: string }> {
  const bytes = await readFile(path);
  // A byte-order mark is not SQL; the checksum still covers the exact bytes.
  return { sql: bytes.toString('utf8').replace(/^\uFEFF/, ''), checksum: sha256Hex(bytes) };
}

export function sha256Hex(data: Uint8Array | string): string {
  return createHash('sha256').update(data).digest('hex');
}
