// Drivers of node-postgres and Kysely: being written.
import type { AdapterUnderTest } from "./adapter.js";
export const adapters: AdapterUnderTest[] = [];
