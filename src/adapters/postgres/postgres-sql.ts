/** The SQL pgfence/postgres sends of its own (everything else is the core's statements). */

/** One row with one column named `column`: whether the instance's column transform keeps names as they are. */
export const namesKeptProbeSql = (column: string): string => `SELECT 1 AS ${column}`;
