// pgfence/knex: being written (issue 29).
export {};
