/**
 * The one mechanism for the stateful core's explicit states (the wait line, a waiter, a session):
 * each object keeps one tagged state value and changes it only through `transition`, which refuses a
 * move its table does not list. The same tables draw the state diagrams in docs/ARCHITECTURE.md
 * (`stateDiagram`; test/state-machines.test.ts checks the document against them), so the code, the
 * diagrams and the Promela models (models/) name the same states.
 */
/** A tagged state: `kind` names it; the other fields are what that state carries. */
export interface Tagged<K extends string = string> {
  readonly kind: K;
}

/** For each state, the states it may move to. */
export type TransitionTable<K extends string> = { readonly [From in K]: readonly K[] };

/**
 * A move the table does not allow: a bug in pgfence, never the caller's doing (so not one of the
 * public PgfenceError codes).
 */
export class IllegalTransitionError extends Error {
  constructor(
    readonly machine: string,
    readonly from: string,
    readonly to: string,
  ) {
    super(`${machine}: no transition from '${from}' to '${to}' (a bug in pgfence: please report it)`);
    this.name = 'IllegalTransitionError';
  }
}

/** A named table of states and their transitions. */
export class StateMachine<K extends string> {
  constructor(
    readonly name: string,
    readonly table: TransitionTable<K>,
  ) {}

  /** Whether `from` may move to `to`. */
  allows(from: K, to: K): boolean {
    return this.table[from].includes(to);
  }

  /** Returns `next` if the table lets `current` move to it; throws IllegalTransitionError otherwise. */
  transition<S extends Tagged<K>>(current: Tagged<K>, next: S): S {
    if (!this.allows(current.kind, next.kind)) throw new IllegalTransitionError(this.name, current.kind, next.kind);
    return next;
  }

  /** Every state, in the table's order. */
  get states(): K[] {
    return Object.keys(this.table) as K[];
  }

  /** The pairs the table does not allow (what a test drives to see each refused). */
  illegalMoves(): [K, K][] {
    return this.states.flatMap((from) => this.states.filter((to) => !this.allows(from, to)).map((to): [K, K] => [from, to]));
  }

  /** The diagram as Mermaid `stateDiagram-v2` text, for docs/ARCHITECTURE.md. */
  diagram(initial: K): string {
    const lines = ['stateDiagram-v2', `  [*] --> ${initial}`];
    for (const from of this.states) for (const to of this.table[from]) lines.push(`  ${from} --> ${to}`);
    return lines.join('\n');
  }
}
