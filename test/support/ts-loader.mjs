// `node --import ./ts-loader.mjs child.ts`: runs the test's TypeScript (and src/ itself) in a child
// process, for the tests whose actors must be processes of their own (SIGSTOP, SIGKILL). Each .ts
// file is transpiled on load with the project's own TypeScript; no type check (the suite's typecheck does that).
import { register } from 'node:module';

register('./ts-hooks.mjs', import.meta.url);
