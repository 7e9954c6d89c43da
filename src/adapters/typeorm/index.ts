// pgfence/typeorm: being written (issue 29).
export {};
