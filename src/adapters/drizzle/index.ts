// pgfence/drizzle: being written (issue 29).
export {};
