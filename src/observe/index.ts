// The observe area as the rest of pgfence sees it: other areas import from here, not from its files.
export * from './events.js';
export * from './inspect.js';
export * from './logger.js';
export * from './metrics.js';
export * from './name-registry.js';
export * from './observer.js';
