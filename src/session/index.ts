// The session area as the rest of pgfence sees it: other areas import from here, not from its files.
export * from './check-out.js';
export * from './connection-config.js';
export * from './connection-source.js';
export * from './listener.js';
export * from './multi-host.js';
export * from './op-statements.js';
export * from './pooler-detection.js';
export * from './server-settings.js';
export * from './session-pool.js';
export * from './session-sql.js';
export { SESSION_STATES, type SessionState, type SessionStateKind } from './session-state.js';
export * from './session.js';
export * from './short-statements.js';
