/**
 * TypeORM's entity metadata, as pgfence's guarded statements need it: the table, a property's column,
 * values prepared the way TypeORM writes them (column transformers, relation ids, dates) and rows read
 * back the way TypeORM loads them. pgfence's statements name SQL tables and columns; this is the map.
 */
import type { DataSource, EntityMetadata, EntityTarget, QueryRunner } from 'typeorm';

type ColumnMetadata = EntityMetadata['columns'][number];
import { describeType, InvalidArgumentError } from '../../core/index.js';

/** The metadata of `entity` in `dataSource`, or InvalidArgumentError when the DataSource does not know it. */
export function entityMetadata(dataSource: DataSource, entity: unknown, argument = 'entity'): EntityMetadata {
  const known = (entity !== null && (typeof entity === 'function' || typeof entity === 'object' || typeof entity === 'string')) && dataSource.hasMetadata(entity as EntityTarget<unknown>);
  if (!known) {
    throw new InvalidArgumentError(
      argument,
      `expected an entity of this DataSource (a class, an EntitySchema or an entity name listed in its entities), got ${describeType(entity)}` +
        (dataSource.isInitialized ? '' : ' (the DataSource is not initialized: call dataSource.initialize() first)'),
    );
  }
  return dataSource.getMetadata(entity as EntityTarget<unknown>);
}

/** The entity's table as pgfence's statements name it: `table` or `schema.table`. */
export function tableOf(metadata: EntityMetadata): string {
  return metadata.schema ? `${metadata.schema}.${metadata.tableName}` : metadata.tableName;
}

/**
 * The SQL column for a fencing or version column option: an entity property (its column), a column name
 * of the entity, or a column the entity does not map at all (kept as written).
 */
export function columnName(metadata: EntityMetadata, name: string): string {
  return metadata.findColumnWithPropertyPath(name)?.databaseName ?? metadata.findColumnWithDatabaseName(name)?.databaseName ?? name;
}

/** The columns behind one property: itself, a relation's join columns, or an embedded object's columns. */
function columnsOf(metadata: EntityMetadata, property: string): ColumnMetadata[] {
  const columns = metadata.findColumnsWithPropertyPath(property);
  if (columns.length > 0) return columns;
  return metadata.findEmbeddedWithPropertyPath(property)?.columnsFromTree ?? [];
}

/**
 * `values` (entity properties) as column values, each prepared as TypeORM's update builder prepares it:
 * a related entity gives its referenced column, anything else goes through the driver's
 * preparePersistentValue (column transformers, dates, JSON). `argument` names `set` or `where` in errors.
 */
export function columnValues(dataSource: DataSource, metadata: EntityMetadata, values: unknown, argument: 'set' | 'where'): Record<string, unknown> {
  if (typeof values !== 'object' || values === null || Array.isArray(values)) {
    throw new InvalidArgumentError(argument, `expected an object of ${metadata.name} properties, got ${describeType(values)}`);
  }
  const out: Record<string, unknown> = {};
  for (const [property, given] of Object.entries(values)) {
    const columns = columnsOf(metadata, property);
    if (columns.length === 0) throw new InvalidArgumentError(`${argument}.${property}`, `${metadata.name} has no column property "${property}"`);
    if (typeof given === 'function') {
      throw new InvalidArgumentError(`${argument}.${property}`, 'a raw SQL value (a function) is not a value: write it with fenced(queryBuilder, token)');
    }
    // Left for pgfence to refuse (undefined is not a value: null is).
    if (given === undefined) {
      out[columns[0]!.databaseName] = undefined;
      continue;
    }
    const embedded = columns[0]!.propertyPath !== property && !columns[0]!.relationMetadata;
    for (const column of columns) {
      let value = column.getEntityValue({ [property]: given } as never, false);
      // Part of an embedded object the caller did not give: not written, not compared.
      if (embedded && value === undefined) continue;
      if (column.referencedColumn && isEntityLike(value)) value = column.referencedColumn.getEntityValue(value as never);
      else value = dataSource.driver.preparePersistentValue(value, column);
      out[column.databaseName] = value;
    }
  }
  return out;
}

function isEntityLike(value: unknown): boolean {
  return typeof value === 'object' && value !== null && !(value instanceof Date) && !(value instanceof Uint8Array);
}

/**
 * A row of the entity's table (SQL column names, as RETURNING * gives it) as an entity, hydrated as
 * TypeORM's loader hydrates one: each mapped column through the driver's prepareHydratedValue (column
 * transformers, dates), set on a new instance of the entity's class (its constructor not called).
 */
export function toEntity<E>(dataSource: DataSource, metadata: EntityMetadata, runner: QueryRunner | undefined, row: Record<string, unknown>): E {
  const entity = metadata.create(runner, { fromDeserializer: true }) as Record<string, unknown>;
  for (const column of metadata.columns) {
    // Relation ids without a property of their own (TypeORM loads them only with their relation).
    if (column.isVirtual) continue;
    const value = row[column.databaseName];
    if (value === undefined) continue;
    column.setEntityValue(entity, dataSource.driver.prepareHydratedValue(value, column));
  }
  return entity as E;
}
