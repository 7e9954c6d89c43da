// The core area as the rest of pgfence sees it: other areas import from here, not from its files.
export * from './array-text.js';
export * from './handle.js';
export * from './json.js';
export * from './signals.js';
export * from './sql-executor.js';
export * from './sqlstate.js';
export * from './vocabulary.js';
export * from './errors.js';
export * from './describe-type.js';
export * from './text-table.js';
export * from './state-machine.js';
