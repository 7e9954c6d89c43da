/** The bench's optional peers (dev dependencies), loaded when a row needs them. */

/** postgres.js's function (typed from the import itself: postgres 3's types say `export =`, 4's `export default`). */
export const loadPostgresJs = async () => (await import('postgres')).default;
