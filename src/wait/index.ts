// The wait area as the rest of pgfence sees it: other areas import from here, not from its files.
export * from './marker-sql.js';
export * from './strategy.js';
export * from './wait-line.js';
export * from './wait-lines.js';
export { WaitCount, WAITER_STATES, type WaiterState } from './waiter.js';
export { WAIT_LINE_STATES, type LineState } from './line-states.js';
