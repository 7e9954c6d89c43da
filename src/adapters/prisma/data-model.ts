/**
 * Prisma model names and field names, as pgfence's SQL needs them: tables and columns (@@map, @map,
 * @@schema). Read from the client's runtime data model, the one Prisma itself maps every query
 * through (`_runtimeDataModel`: on the client, its transaction clients and its extensions alike).
 * Prisma 7's generated client exports no other description of @map and @@map: `Prisma.ModelName`
 * and the `*ScalarFieldEnum` objects carry the names of the schema, not the database's.
 */
import { describeType, InvalidArgumentError } from '../../core/index.js';

/** One field of the runtime data model (DMMF's Field, as Prisma's runtime keeps it). */
interface RuntimeField {
  name: string;
  /** 'scalar' and 'enum' are columns; 'object' is a relation, 'unsupported' a type Prisma cannot read. */
  kind: string;
  /** Prisma's type: Int, BigInt, String, Json, DateTime, a model's or an enum's name. */
  type: string;
  /** The column, when @map names one. */
  dbName?: string | null;
}

interface RuntimeModel {
  fields: RuntimeField[];
  /** The table, when @@map names one. */
  dbName?: string | null;
  /** With multiSchema, the model's @@schema. */
  schema?: string | null;
}

/** A model's table and the columns of its scalar fields, both ways. */
export interface ModelTable {
  model: string;
  /** `table` or `schema.table`, as pgfence's fencing functions take it. */
  table: string;
  /** Field name -> column name, for every scalar and enum field. */
  columns: ReadonlyMap<string, string>;
  /** Column name -> field name. */
  fields: ReadonlyMap<string, string>;
  /** Fields whose SQL value is JSON text (Prisma's Json type). */
  jsonFields: ReadonlySet<string>;
}

const tables = new WeakMap<object, Map<string, ModelTable>>();

/** The runtime data model of a Prisma client or transaction client (InvalidArgumentError when it has none). */
function runtimeModels(db: object): Record<string, RuntimeModel> {
  const dataModel = (db as { _runtimeDataModel?: { models?: unknown } })._runtimeDataModel;
  const models = dataModel?.models;
  if (typeof models !== 'object' || models === null) {
    throw new InvalidArgumentError('db', `expected a Prisma 7 client or transaction client with its data model, got ${describeType(db)} without one`);
  }
  return models as Record<string, RuntimeModel>;
}

/** The table of `model` and its columns; InvalidArgumentError (before any I/O) for a model the client does not have. */
export function modelTable(db: object, model: unknown): ModelTable {
  const models = runtimeModels(db);
  if (typeof model !== 'string') throw new InvalidArgumentError('model', `expected a model name of the Prisma schema, got ${describeType(model)}`);
  let cached = tables.get(models);
  if (!cached) tables.set(models, (cached = new Map()));
  const hit = cached.get(model);
  if (hit) return hit;
  const m = Object.hasOwn(models, model) ? models[model] : undefined;
  if (!m) {
    throw new InvalidArgumentError('model', `no model "${model.slice(0, 80)}" in this Prisma client (models: ${Object.keys(models).join(', ')})`);
  }
  const columns = new Map<string, string>();
  const fields = new Map<string, string>();
  const jsonFields = new Set<string>();
  for (const f of m.fields) {
    if (f.kind !== 'scalar' && f.kind !== 'enum') continue;
    const column = f.dbName ?? f.name;
    columns.set(f.name, column);
    fields.set(column, f.name);
    if (f.type === 'Json') jsonFields.add(f.name);
  }
  const name = m.dbName ?? model;
  const table: ModelTable = { model, table: m.schema ? `${m.schema}.${name}` : name, columns, fields, jsonFields };
  cached.set(model, table);
  return table;
}

/** The column of one scalar field; InvalidArgumentError naming `argument` for a field the model does not have as a column. */
export function columnOf(t: ModelTable, field: unknown, argument: string): string {
  const column = typeof field === 'string' ? t.columns.get(field) : undefined;
  if (column === undefined) {
    throw new InvalidArgumentError(
      argument,
      `model ${t.model} has no scalar field ${typeof field === 'string' ? `"${field.slice(0, 80)}"` : describeType(field)} ` +
        `(its columns' fields: ${[...t.columns.keys()].join(', ')}; relations are not columns)`,
    );
  }
  return column;
}

/**
 * `{ field: value }` as `{ column: value }`. A Json field's value is sent as JSON text (Prisma's raw
 * queries would send a string or an array as text or as an array); null stays NULL. Anything that is
 * not an object is handed on as it is: pgfence's own check then names what is wrong with it.
 */
export function columnValues(t: ModelTable, values: unknown, argument: 'set' | 'where'): unknown {
  if (typeof values !== 'object' || values === null || Array.isArray(values)) return values;
  const out: Record<string, unknown> = {};
  for (const [field, value] of Object.entries(values)) {
    const column = columnOf(t, field, `${argument}.${field}`);
    out[column] = t.jsonFields.has(field) && value !== null && value !== undefined ? JSON.stringify(value) : value;
  }
  return out;
}

/** A row read by column as the model's fields (columns that are no field of the model keep their name). */
export function rowAsFields(t: ModelTable, row: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [column, value] of Object.entries(row)) out[t.fields.get(column) ?? column] = value;
  return out;
}
