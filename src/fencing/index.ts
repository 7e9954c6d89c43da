// The fencing area as the rest of pgfence sees it: other areas import from here, not from its files.
export * from './fenced-claim.js';
export * from './fenced-update-pg.js';
export * from './fenced-update.js';
export * from './column-sql.js';
export * from './guarded-error.js';
export * from './guarded-sql.js';
export * from './identifiers.js';
export * from './token-sql.js';
export * from './versioned-update.js';
