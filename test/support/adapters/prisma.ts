import type { AdapterUnderTest } from './adapter.js';

/** The conformance drivers of pgfence/prisma (being written). */
export const adapters: AdapterUnderTest[] = [];
