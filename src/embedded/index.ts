// The embedded area as the rest of pgfence sees it: other areas import from here, not from its files.
export * from './embedded-postgres.js';
