import type { AdapterUnderTest } from './adapter.js';

/** The conformance drivers of pgfence/drizzle (being written). */
export const adapters: AdapterUnderTest[] = [];
