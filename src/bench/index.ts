// The bench area as the rest of pgfence sees it: other areas import from here, not from its files.
export * from './context.js';
export * from './run.js';
