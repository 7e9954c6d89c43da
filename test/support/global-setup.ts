import type { TestProject } from 'vitest/node';
import { startTestServer } from './server.js';

declare module 'vitest' {
  export interface ProvidedContext {
    databaseUrl: string;
  }
}

export default async function setup(project: TestProject) {
  const server = await startTestServer((msg) => console.log(`[pgfence tests] ${msg}`));
  console.log(`[pgfence tests] PostgreSQL from ${server.source}`);
  project.provide('databaseUrl', server.url);
  return async () => {
    await server.stop();
  };
}
