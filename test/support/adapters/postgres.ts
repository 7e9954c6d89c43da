import type { AdapterUnderTest } from './adapter.js';

/** The conformance drivers of pgfence/postgres (being written). */
export const adapters: AdapterUnderTest[] = [];
