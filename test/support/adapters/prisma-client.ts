// Prisma clients generated from the repository's schemas, at test time (the generated TypeScript is not
// committed): test/fixtures/prisma/schema.prisma for pgfence/prisma's tests, examples/prisma/schema.prisma
// for its example. `prisma generate` writes each next to its schema, in ./generated.
//
// Run as a program it generates every schema (the typecheck needs the fixture's types):
//   node --import ./test/support/ts-loader.mjs test/support/adapters/prisma-client.ts
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmod, mkdir, mkdtemp, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../../..', import.meta.url));
const require = createRequire(import.meta.url);

/** pgfence/prisma's test schema (ConformanceItem, Order, Counter, Document, Shipment, ...). */
export const FIXTURE_SCHEMA = join(root, 'test', 'fixtures', 'prisma', 'schema.prisma');
/** The example's schema (examples/prisma/). */
export const EXAMPLE_SCHEMA = join(root, 'examples', 'prisma', 'schema.prisma');

/** Marks a generated folder with what it was generated from: regenerated when the schema or Prisma changes. */
const STAMP = '.pgfence-schema-sha256';

/**
 * Generates the client of `schema` into `generated/` next to it, unless it is there already from the same
 * schema and Prisma version; returns that folder. Safe when several test files (processes) call it at once:
 * each generates into a folder of its own and renames it into place, so a reader never sees half a client,
 * and the first one in place wins.
 */
export async function generatePrismaClient(schema: string = FIXTURE_SCHEMA): Promise<string> {
  const target = join(dirname(schema), 'generated');
  const stamp = await stampOf(schema);
  if ((await readStamp(target)) === stamp) return target;
  await mkdir(join(root, '.pgfence-test'), { recursive: true });
  // Inside the repository: the rename stays on one file system, and the client's imports (@prisma/client) resolve.
  const work = await mkdtemp(join(root, '.pgfence-test', 'prisma-generate-'));
  try {
    await writeFile(join(work, 'schema.prisma'), await readFile(schema));
    // `prisma generate` needs no schema engine, but looks for one and would download it: any executable will do.
    const engine = join(work, 'schema-engine-stub');
    await writeFile(engine, '#!/bin/sh\necho "pgfence tests: no schema engine"\n');
    await chmod(engine, 0o755);
    await run(process.execPath, [prismaCli(), 'generate', '--schema', join(work, 'schema.prisma')], {
      cwd: work,
      env: { ...process.env, PRISMA_SCHEMA_ENGINE_BINARY: engine, PRISMA_ENGINES_CHECKSUM_IGNORE_MISSING: '1', CHECKPOINT_DISABLE: '1', PRISMA_HIDE_UPDATE_MESSAGE: '1' },
      timeout: 120_000,
    });
    await writeFile(join(work, 'generated', STAMP), stamp);
    await install(join(work, 'generated'), target, stamp, work);
  } finally {
    await rm(work, { recursive: true, force: true });
  }
  return target;
}

/** Moves a generated folder into place; when another process put one there meanwhile, the newest schema's wins. */
async function install(generated: string, target: string, stamp: string, work: string): Promise<void> {
  for (let attempt = 0; attempt < 5; attempt++) {
    try {
      await rename(generated, target);
      return;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'ENOTEMPTY' && code !== 'EEXIST') throw err;
      if ((await readStamp(target)) === stamp) return; // another process generated the same client
      // A stale client (another schema): moved aside whole, then ours goes in.
      await rename(target, join(work, `stale-${attempt}`)).catch((e: NodeJS.ErrnoException) => {
        if (e.code !== 'ENOENT') throw e; // gone already: another process moved it
      });
    }
  }
  throw new Error(`could not put the generated Prisma client in ${target}`);
}

/** The generated client's module (client.ts), generated first if needed. */
export async function importPrismaClient<M = Record<string, unknown>>(schema: string = FIXTURE_SCHEMA): Promise<M> {
  const dir = await generatePrismaClient(schema);
  return (await import(pathToFileURL(join(dir, 'client.ts')).href)) as M;
}

function prismaCli(): string {
  return join(dirname(require.resolve('prisma/package.json')), 'build', 'index.js');
}

async function stampOf(schema: string): Promise<string> {
  const prisma = JSON.parse(await readFile(require.resolve('prisma/package.json'), 'utf8')) as { version: string };
  return createHash('sha256').update(prisma.version).update('\0').update(await readFile(schema)).digest('hex');
}

async function readStamp(dir: string): Promise<string | null> {
  return readFile(join(dir, STAMP), 'utf8').catch(() => null); // not generated (yet)
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  for (const schema of [FIXTURE_SCHEMA, EXAMPLE_SCHEMA]) console.log(`generated ${await generatePrismaClient(schema)}`);
}
