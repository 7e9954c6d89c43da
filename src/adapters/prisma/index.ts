// pgfence/prisma: being written (issue 29).
export {};
