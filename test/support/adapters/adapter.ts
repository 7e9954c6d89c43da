import type { FencedClaimResult, FencedUpdateResult, FencedXactLockResult, VersionedUpdateResult, XactLockOptions, XactLockResult } from '../../../src/index.js';

/**
 * One data-layer adapter under the conformance suite (test/adapters.test.ts), after madelson/DistributedLock's
 * one suite over every provider. Each adapter's driver lives in test/support/adapters/<name>.ts and speaks
 * through the adapter's own public API (the export a user imports), with the library's own transaction
 * object: nothing here reaches under the library.
 *
 * The suite creates, in each adapter's database, before open():
 *   CREATE TABLE conformance_items (id int PRIMARY KEY, label text, n int NOT NULL DEFAULT 0,
 *                                   fencing_token bigint, version bigint NOT NULL DEFAULT 0)
 * The specs below name its columns as they are in SQL; a typed adapter maps them to its own schema
 * types (a Drizzle table, a Prisma model, a TypeORM entity, ...) in its driver.
 */
export interface AdapterUnderTest {
  /** As printed in the matrix: 'node-postgres', 'kysely', 'postgres.js', 'prisma', 'drizzle/node-postgres', ... */
  name: string;
  /** The library and its installed version, e.g. 'postgres 3.4.10' (read from its package.json). */
  library(): string;
  /** The library has an update builder, and the client offers `fencedBuilder` (the suite then runs the builder test). */
  updateBuilder?: true;
  /** A client of the library on `url` (its own pool / connections). */
  open(url: string): Promise<AdapterClient>;
}

/** The library's transaction object, opaque to the suite. */
export type Tx = unknown;

export interface ItemsSpec {
  where: { id: number };
}

export interface AdapterClient {
  /**
   * Runs `fn` in a transaction of the library's own (sql.begin, $transaction, db.transaction, ...):
   * commits when it resolves, rolls back when it throws (the error is thrown again).
   */
  transaction<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;
  /** The library's object outside any transaction (what xactLock must refuse with NotInTransactionError). */
  outside(): unknown;
  xactLock(tx: Tx, name: string, opts?: XactLockOptions): Promise<XactLockResult>;
  tryXactLock(tx: Tx, name: string, opts?: Omit<XactLockOptions, 'timeoutMs'>): Promise<XactLockResult | null>;
  /** Calls the adapter's xactLock with whatever the test passes, unchecked (bad input must be refused before any I/O). */
  xactLockUnchecked(tx: unknown, name: unknown, opts?: unknown): Promise<unknown>;
  /** fencedUpdate of conformance_items, set { label }. */
  fencedUpdate(tx: Tx, spec: ItemsSpec & { set: { label: string }; token: bigint }): Promise<FencedUpdateResult>;
  /** fencedClaim of conformance_items: the claimed rows' `n` (as numbers) with the result. */
  fencedClaim(tx: Tx, spec: ItemsSpec & { token: bigint }): Promise<Omit<FencedClaimResult, 'rows'> & { n: number[] }>;
  /** versionedUpdate of conformance_items, set { label }. */
  versionedUpdate(tx: Tx, spec: ItemsSpec & { set: { label: string }; version: bigint }): Promise<VersionedUpdateResult>;
  /**
   * The adapter's guarded-update idiom on the library's own update builder (fenced(builder, token)),
   * setting { label } where id = spec.where.id; absent where the library has no update builder.
   */
  fencedBuilder?(tx: Tx, spec: ItemsSpec & { set: { label: string }; token: bigint }): Promise<FencedUpdateResult>;
  /** A raw statement in the transaction through the library (to see whether the transaction still takes statements). */
  execute(tx: Tx, text: string): Promise<void>;
  close(): Promise<void>;
}

export type { FencedXactLockResult };
