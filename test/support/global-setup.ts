import type { TestProject } from 'vitest/node';
import { fileURLToPath } from 'node:url';
import { ensureBuilt } from './build.js';
import { startTestServer } from './server.js';

declare module 'vitest' {
  export interface ProvidedContext {
    databaseUrl: string;
  }
}

export default async function setup(project: TestProject) {
  await ensureBuilt(fileURLToPath(new URL('../..', import.meta.url)));
  const server = await startTestServer((msg) => console.log(`[pgfence tests] ${msg}`));
  console.log(`[pgfence tests] PostgreSQL from ${server.source}`);
  project.provide('databaseUrl', server.url);
  return async () => {
    await server.stop();
  };
}
