// The lease area as the rest of pgfence sees it: other areas import from here, not from its files.
export * from './leader.js';
export * from './lease-manager.js';
export * from './lease-options.js';
export * from './lease-semaphore.js';
