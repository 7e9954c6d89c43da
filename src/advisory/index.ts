// The advisory area as the rest of pgfence sees it: other areas import from here, not from its files.
export * from './acquire-all.js';
export * from './acquire-options.js';
export * from './advisory-lock.js';
export * from './advisory-sql.js';
export * from './composite-handle.js';
export * from './lock-budget.js';
export * from './lock-manager.js';
export * from './nesting.js';
export * from './semaphore-options.js';
export * from './semaphore.js';
export * from './xact-pg.js';
export * from './xact-sql.js';
export * from './xact.js';
