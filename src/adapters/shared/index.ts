// What every data-layer adapter shares: the transaction seam, placeholders, pgfence's schema as migration steps.
export * from './placeholders.js';
export * from './transaction.js';
export * from './schema-migrations.js';
export * from './savepoint-scripts.js';
export * from './schema-script-sql.js';
