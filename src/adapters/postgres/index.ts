// pgfence/postgres: being written (issue 29).
export {};
