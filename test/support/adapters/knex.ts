import type { AdapterUnderTest } from './adapter.js';

/** The conformance drivers of pgfence/knex (being written). */
export const adapters: AdapterUnderTest[] = [];
