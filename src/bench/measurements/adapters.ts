/**
 * xactLock through each data-layer adapter next to the same library issuing pg_advisory_xact_lock
 * itself: one transaction of the library's own per cycle (begin, lock a free key, commit), one
 * connection per side, in the bench database (pgfence's schema present, so xactLock is guarded against
 * leases, as users run it). A library that is not installed is skipped with a note; Prisma also needs
 * its CLI to generate a client (into .pgfence-bench/ under the working directory).
 */

import { execFile } from 'node:child_process';
import { chmod, mkdir, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';
import { adapterSurfaces } from '../../adapters/index.js';
import { lockKey } from '../../keys.js';
import type { BenchContext } from '../context.js';
import { atMost, timeRow } from '../report.js';
import { fmt, pairedRatios, spread } from '../stats.js';
import { loadPostgresJs } from '../peers.js';
import { compareThroughput } from '../timing.js';

/** One library's two sides: the adapter's xactLock and the library's own statement, each in its own transaction. */
interface LibrarySides {
  label: string;
  /** A transaction of the library's with the adapter's xactLock in it. */
  pgfence: () => Promise<unknown>;
  /** The same transaction with the library sending pg_advisory_xact_lock itself. */
  bare: () => Promise<unknown>;
  close: () => Promise<unknown>;
}

type Open = (ctx: BenchContext, name: string, key: bigint) => Promise<LibrarySides>;

const LIBRARIES: Record<string, Open> = {
  async kysely(ctx, name, key) {
    const { Kysely, PostgresDialect, sql } = await import('kysely');
    const { xactLock } = await adapterSurfaces.kysely();
    const open = () => new Kysely<object>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: ctx.urlFor('m13k'), max: 1 }) }) });
    const [mine, theirs] = [open(), open()];
    return {
      label: 'Kysely',
      pgfence: () => mine.transaction().execute((trx) => xactLock(trx, name)),
      bare: () => theirs.transaction().execute((trx) => sql`SELECT pg_advisory_xact_lock(${key})`.execute(trx)),
      close: () => Promise.all([mine.destroy(), theirs.destroy()]),
    };
  },
  async postgres(ctx, name, key) {
    const postgres = await loadPostgresJs();
    const { xactLock } = await adapterSurfaces.postgres();
    const open = () => postgres(ctx.urlFor('m13p'), { max: 1, onnotice: () => {} });
    const [mine, theirs] = [open(), open()];
    return {
      label: 'postgres.js',
      pgfence: () => mine.begin((tx) => xactLock(tx, name)),
      bare: () => theirs.begin((tx) => tx`SELECT pg_advisory_xact_lock(${key.toString()}::int8)`),
      close: () => Promise.all([mine.end(), theirs.end()]),
    };
  },
  async prisma(ctx, name, key) {
    const { PrismaPg } = await import('@prisma/adapter-pg');
    const { xactLock } = await adapterSurfaces.prisma();
    const PrismaClient = await generatedPrismaClient();
    const open = () => new PrismaClient({ adapter: new PrismaPg({ connectionString: ctx.urlFor('m13r'), max: 1 }) });
    const [mine, theirs] = [open(), open()];
    return {
      label: 'Prisma',
      pgfence: () => mine.$transaction((tx: never) => xactLock(tx, name)),
      bare: () => theirs.$transaction((tx: { $executeRawUnsafe(q: string, ...v: unknown[]): Promise<number> }) => tx.$executeRawUnsafe('SELECT pg_advisory_xact_lock($1)', key)),
      close: () => Promise.all([mine.$disconnect(), theirs.$disconnect()]),
    };
  },
  async drizzle(ctx, name, key) {
    const { drizzle } = await import('drizzle-orm/node-postgres');
    const { sql } = await import('drizzle-orm');
    const { xactLock } = await adapterSurfaces.drizzle();
    const pools = [0, 1].map(() => new pg.Pool({ connectionString: ctx.urlFor('m13d'), max: 1 }));
    const [mine, theirs] = pools.map((pool) => drizzle({ client: pool }));
    return {
      label: 'Drizzle (node-postgres)',
      pgfence: () => mine!.transaction((tx) => xactLock(tx, name)),
      bare: () => theirs!.transaction((tx) => tx.execute(sql`SELECT pg_advisory_xact_lock(${key})`)),
      close: () => Promise.all(pools.map((p) => p.end())),
    };
  },
  async typeorm(ctx, name, key) {
    const { DataSource } = await import('typeorm');
    const { xactLock } = await adapterSurfaces.typeorm();
    const [mine, theirs] = await Promise.all([0, 1].map(() => new DataSource({ type: 'postgres', url: ctx.urlFor('m13t'), poolSize: 1, entities: [] }).initialize()));
    return {
      label: 'TypeORM',
      pgfence: () => mine!.transaction((manager) => xactLock(manager, name)),
      bare: () => theirs!.transaction((manager) => manager.query('SELECT pg_advisory_xact_lock($1)', [key.toString()])),
      close: () => Promise.all([mine!.destroy(), theirs!.destroy()]),
    };
  },
  async knex(ctx, name, key) {
    const { default: knex } = await import('knex');
    const { xactLock } = await adapterSurfaces.knex();
    const open = () => knex({ client: 'pg', connection: ctx.urlFor('m13n'), pool: { min: 0, max: 1 } });
    const [mine, theirs] = [open(), open()];
    return {
      label: 'Knex',
      pgfence: () => mine.transaction((trx) => xactLock(trx, name)),
      bare: () => theirs.transaction((trx) => trx.raw('SELECT pg_advisory_xact_lock(?)', [key.toString()])),
      close: () => Promise.all([mine.destroy(), theirs.destroy()]),
    };
  },
};

export async function adapters(ctx: BenchContext): Promise<void> {
  for (const [id, open] of Object.entries(LIBRARIES)) {
    const name = ctx.name('adapter', id);
    let sides: LibrarySides;
    try {
      sides = await open(ctx, name, lockKey(ctx.name('adapter-baseline', id)));
    } catch (err) {
      ctx.row({ measurement: `13. xactLock through pgfence/${id}`, pgfence: `skipped: ${(err as Error).message.split('\n')[0]}` });
      continue;
    }
    try {
      const r = await compareThroughput(ctx.cfg, [
        { label: 'pgfence', workers: 1, cycle: sides.pgfence },
        { label: 'bare', workers: 1, cycle: sides.bare },
      ]);
      // Times per transaction; the ratio of times is the baseline's rate over pgfence's, round by round.
      const ms = (rates: number[]) => spread(rates.map((rate) => 1000 / rate));
      timeRow(ctx, `13. xactLock through pgfence/${id} (${sides.label}) vs the library's own`, ms(r.rates[0]!), ms(r.rates[1]!), pairedRatios(r.rates[1]!, r.rates[0]!), atMost(1.1), {
        pgfence: r.cpu[0]!,
        baseline: r.cpu[1]!,
      });
      ctx.note(`13. ${sides.label} transactions/s per round: pgfence's xactLock ${fmt.list(r.rates[0]!)}; the library's pg_advisory_xact_lock ${fmt.list(r.rates[1]!)}`);
    } finally {
      await sides.close();
    }
  }
}

/** A Prisma client generated for the bench (no models: raw statements only), with the prisma CLI installed beside pgfence. */
async function generatedPrismaClient(): Promise<new (options: object) => any> {
  const require = createRequire(join(process.cwd(), 'package.json'));
  const cli = require.resolve('prisma/build/index.js');
  const dir = join(process.cwd(), '.pgfence-bench', 'prisma');
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, 'schema.prisma'), 'generator client {\n  provider = "prisma-client-js"\n  output   = "./generated"\n}\ndatasource db {\n  provider = "postgresql"\n}\n');
  // `prisma generate` needs no schema engine but looks for one: any executable will do.
  const engine = join(dir, 'schema-engine-stub');
  await writeFile(engine, '#!/bin/sh\necho "pgfence bench: no schema engine"\n');
  await chmod(engine, 0o755);
  await promisify(execFile)(process.execPath, [cli, 'generate', '--schema', join(dir, 'schema.prisma')], {
    cwd: dir,
    env: { ...process.env, PRISMA_SCHEMA_ENGINE_BINARY: engine, PRISMA_ENGINES_CHECKSUM_IGNORE_MISSING: '1', CHECKPOINT_DISABLE: '1', PRISMA_HIDE_UPDATE_MESSAGE: '1' },
  });
  const generated = (await import(pathToFileURL(join(dir, 'generated', 'index.js')).href)) as { default?: { PrismaClient?: unknown }; PrismaClient?: unknown };
  return (generated.PrismaClient ?? generated.default?.PrismaClient) as new (options: object) => any;
}
