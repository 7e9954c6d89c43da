import type { AdapterUnderTest } from './adapter.js';

/** The conformance drivers of pgfence/typeorm (being written). */
export const adapters: AdapterUnderTest[] = [];
