// README's Quick start, run as written: what a newcomer pastes first must work on every supported Node.
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { beforeAll, describe, expect, it } from 'vitest';
import { useTestDatabase } from './support/db.js';

const run = promisify(execFile);
const root = fileURLToPath(new URL('..', import.meta.url));
let url: string;

beforeAll(async () => {
  url = (await useTestDatabase('readme')).url; // a fresh database: the snippet's migrate() creates the schema
});

/** The first fenced code block after a heading of README.md. */
function codeAfter(heading: string): string {
  const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
  const from = readme.indexOf(`\n${heading}\n`);
  expect(from, heading).toBeGreaterThan(0);
  const m = /```\w*\n([^]*?)```/.exec(readme.slice(from));
  return m![1]!;
}

describe('README', () => {
  it('Quick start runs as written on this Node (importing pgfence by its name)', async () => {
    const code = codeAfter('## Quick start');
    // As a user runs it: an ES module importing 'pgfence' (the package resolves itself from its root).
    const { stdout } = await run(process.execPath, ['--input-type=module', '-e', code], {
      cwd: root,
      env: { ...process.env, DATABASE_URL: url },
      timeout: 60_000,
    });
    expect(stdout).toContain('charged order 123');
    expect(stdout).toContain('report built');
  });
});
