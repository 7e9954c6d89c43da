/**
 * The models of a generated Prisma client, read from its own types: each model delegate
 * (`prisma.order`, `tx.order`) carries its payload under a symbol key
 * (`[K: symbol]: { types: { payload: $OrderPayload } }`), whose `name` is the model's name and whose
 * `scalars` are its fields as Prisma reads them (Int as number, BigInt as bigint, Decimal, Date, ...).
 * This works alike for a PrismaClient, its interactive transaction client and its extensions.
 */

/**
 * The payloads of every model of a Prisma client type (`$OrderPayload | $CustomerPayload | ...`): each
 * model delegate's, its `$` methods and symbol keys left out.
 */
export type PrismaModelPayloads<C> = {
  [K in keyof C & string]: K extends `$${string}` ? never : C[K] extends { [k: symbol]: { types: { payload: infer P } } } ? P : never;
}[keyof C & string];

/**
 * The model names of a Prisma client type, as in the schema (`Prisma.ModelName`): 'Order', 'ConformanceItem'.
 *
 * @example
 * ```ts fragment
 * import type { PrismaModelName } from 'pgfence/prisma';
 *
 * const model: PrismaModelName<typeof prisma> = 'Order';
 * ```
 */
export type PrismaModelName<C> = PrismaModelPayloads<C> extends infer P ? (P extends { name: infer N extends string } ? N : never) : never;

/**
 * A model's scalar fields (columns, not relations) and their types as Prisma reads them.
 *
 * @example
 * ```ts fragment
 * import type { PrismaModelFields } from 'pgfence/prisma';
 *
 * const order: PrismaModelFields<typeof prisma, 'Order'> = await prisma.order.findUniqueOrThrow({ where: { id: 42 } });
 * ```
 */
export type PrismaModelFields<C, M extends string> = Extract<PrismaModelPayloads<C>, { name: M }> extends { scalars: infer S } ? S : never;

/** A scalar field of a model. */
export type PrismaFieldName<C, M extends string> = keyof PrismaModelFields<C, M> & string;

/** The fields a fencing field's default is looked for under: the column fencing_token, by Prisma's naming or SQL's. */
export type DefaultFencingField = 'fencingToken' | 'fencing_token';

/** Equality conditions on a model's fields (null means IS NULL); at least one at run time. */
export type PrismaWhere<C, M extends string> = { [K in PrismaFieldName<C, M>]?: PrismaModelFields<C, M>[K] | null };

/** Fields to write: any of the model's scalar fields except `Excluded` (the field pgfence writes itself). */
export type PrismaSet<C, M extends string, Excluded extends string> = Partial<Omit<PrismaModelFields<C, M>, Excluded>>;
