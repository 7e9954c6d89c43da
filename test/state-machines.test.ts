// The state diagrams in docs/ARCHITECTURE.md are the code's own transition tables (issue 30): each
// machine's diagram() must appear there verbatim, so a state or a move added to the code and not to the
// document (or the other way round) fails here. The moves each table refuses are driven in
// test/wait-states.test.ts and test/session-states.test.ts; the models in models/ use the same names.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { SESSION_STATES } from '../src/session/session-state.js';
import { WAIT_LINE_STATES } from '../src/wait/line-states.js';
import { WAITER_STATES } from '../src/wait/waiter.js';

const architecture = readFileSync(join(import.meta.dirname, '..', 'docs', 'ARCHITECTURE.md'), 'utf8');
/** The ```mermaid blocks of the document, as written. */
const diagrams = [...architecture.matchAll(/```mermaid\n([\s\S]*?)\n```/g)].map((m) => m[1]!);

describe('docs/ARCHITECTURE.md draws the code state machines', () => {
  for (const [machine, initial] of [
    [WAIT_LINE_STATES, 'idle'],
    [WAITER_STATES, 'queued'],
    [SESSION_STATES, 'connecting'],
  ] as const) {
    it(`${machine.name}: the document's diagram is the transition table`, () => {
      const drawn = diagrams.find((d) => d.split('\n').some((line) => line.trim() === `[*] --> ${initial}`));
      expect(drawn, `a mermaid block starting at ${initial}`).toBeDefined();
      expect(drawn).toBe(machine.diagram(initial as never));
    });
  }

  it('names every state of each machine in the sentences beside its diagram', () => {
    for (const machine of [WAIT_LINE_STATES, WAITER_STATES, SESSION_STATES]) {
      for (const state of machine.states) expect(architecture, `${machine.name}.${state}`).toContain(`\`${state}\``);
    }
  });
});
