// The cli area as the rest of pgfence sees it: other areas import from here, not from its files.
export * from './database.js';
export * from './format.js';
