import { WIDTH, wrap, type Style } from './output.js';
import type { DemoRecord } from './record.js';

interface TableSummary {
  /** Writes the database reported as applied (each one an increment). */
  acknowledged: number;
  /** Writes sent after the writer's lease had passed to a newer token. */
  staleRefused: number;
  staleApplied: number;
  /** The counter in the database at the end. */
  final: number;
  /** Acknowledged increments missing from the final counter. */
  lost: number;
}

export interface Summary {
  grants: number;
  firstToken: bigint | null;
  lastToken: bigint | null;
  workers: number;
  ttlMs: number;
  frozen: { worker: string; token: bigint; ms: number; how: 'stop' | 'block' } | null;
  fenced: TableSummary & {
    /** Increments the refused stale writes would have wiped out. */
    avoided: number;
  };
  control: TableSummary;
}

/** Everything computed from what the workers reported and what the database holds at the end. */
export function summarize(r: DemoRecord): Summary {
  if (!r.final) throw new Error('the demo has no final reading of the counters');
  const tokens = r.holdings.map((h) => h.token).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const fencedAck = r.writes.filter((w) => w.fenced.applied).length;
  const controlAck = r.writes.filter((w) => w.control.applied).length;
  const refused = r.writes.filter((w) => w.stale && !w.fenced.applied && w.fenced.reason === 'stale');
  return {
    grants: r.holdings.length,
    firstToken: tokens[0] ?? null,
    lastToken: tokens.at(-1) ?? null,
    workers: r.workers.length,
    ttlMs: r.ttlMs,
    frozen:
      r.pause && r.pause.resumedAt !== undefined
        ? { worker: r.pause.worker, token: r.pause.token, ms: r.pause.resumedAt - r.pause.pausedAt, how: r.pause.how }
        : null,
    fenced: {
      acknowledged: fencedAck,
      staleRefused: refused.length,
      staleApplied: r.writes.filter((w) => w.stale && w.fenced.applied).length,
      final: r.final.fenced.value,
      lost: fencedAck - r.final.fenced.value,
      avoided: refused.reduce((n, w) => n + (w.fenced.valueNow === undefined ? 0 : w.fenced.valueNow - w.fenced.wanted + 1), 0),
    },
    control: {
      acknowledged: controlAck,
      staleRefused: r.writes.filter((w) => w.stale && !w.control.applied).length,
      staleApplied: r.writes.filter((w) => w.stale && w.control.applied).length,
      final: r.final.control.value,
      lost: controlAck - r.final.control.value,
    },
  };
}

const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

/** The headline: fenced vs unfenced, in one breath. */
function headline(s: Summary): [string, string] {
  const refused = plural(s.fenced.staleRefused, 'stale write');
  const avoided = s.fenced.avoided > 0 ? `, ${plural(s.fenced.avoided, 'lost update')} avoided` : '';
  return [
    `fenced table: ${plural(s.fenced.lost, 'lost update')} (${refused} refused${avoided})`,
    `unfenced control table: ${plural(s.control.lost, 'lost update')} (${plural(s.control.staleApplied, 'stale write')} silently applied)`,
  ];
}

export function renderSummary(s: Summary, style: Style): string {
  const label = 36;
  const col = 18;
  const row = (name: string, a: string, b: string) => `  ${name.padEnd(label)}${a.padStart(col)}${b.padStart(col)}`;
  const tokens = s.firstToken === null ? 'none' : s.firstToken === s.lastToken ? `token ${s.firstToken}` : `tokens ${s.firstToken} to ${s.lastToken}`;
  const lines = [
    style.bold('Summary'),
    `  lease grants      ${s.grants} (${tokens}) among ${s.workers} workers, lease ttl ${(s.ttlMs / 1000).toFixed(1)} s`,
  ];
  if (s.firstToken !== null && s.lastToken !== null && Number(s.lastToken - s.firstToken) + 1 > s.grants) {
    // Readers count the grants, find fewer than the tokens, and wonder where the others went.
    lines.push(
      wrap(
        `(${Number(s.lastToken - s.firstToken) + 1} numbers for ${s.grants} grants: a worker that raced for a free lease and lost ` +
          `drew a token too. Tokens only ever increase; only their order matters.)`,
        WIDTH,
        ' '.repeat(20),
        20,
      ),
    );
  }
  if (s.frozen) {
    lines.push(
      `  frozen holder     ${s.frozen.worker} with token ${s.frozen.token}, for ${(s.frozen.ms / 1000).toFixed(1)} s ` +
        `(${s.frozen.how === 'stop' ? 'SIGSTOP, then SIGCONT' : 'event loop blocked'})`,
    );
  }
  const stale = (t: TableSummary) =>
    t.staleApplied > 0 && t.staleRefused > 0
      ? `${t.staleRefused} ref, ${t.staleApplied} app`
      : t.staleApplied > 0
        ? `${t.staleApplied} applied`
        : `${t.staleRefused} refused`;
  const lost = (n: number, text: string) => (n === 0 ? style.green(text) : style.red(text));
  lines.push(
    '',
    row('', 'fenced table', 'control table'),
    style.dim(row('', 'fencedUpdate()', 'plain UPDATE')),
    row('increments acknowledged', String(s.fenced.acknowledged), String(s.control.acknowledged)),
    row('stale writes (lease already gone)', stale(s.fenced), stale(s.control)),
    row('final counter in PostgreSQL', String(s.fenced.final), String(s.control.final)),
    // Pad before colouring: escape sequences have no width.
    `  ${'lost updates'.padEnd(label)}${lost(s.fenced.lost, String(s.fenced.lost).padStart(col))}${lost(s.control.lost, String(s.control.lost).padStart(col))}`,
  );
  const more = s.control.acknowledged - s.fenced.acknowledged;
  if (more > 0 && more === s.control.staleApplied - s.fenced.staleApplied) {
    // Otherwise "12 vs 13 acknowledged" reads as if the fenced table had dropped one.
    const note = wrap(
      `  (The control table acknowledged ${more} increment${more === 1 ? '' : 's'} more: the stale write${more === 1 ? '' : 's'}, ` +
        `which the fenced table refused.)`,
      WIDTH,
      '',
      3,
    );
    lines.push(...note.split('\n').map((l) => style.dim(l)));
  }
  lines.push('');
  const [fenced, control] = headline(s);
  lines.push(`  ${(s.fenced.lost === 0 ? style.green : style.red)(style.bold(fenced))}`);
  lines.push(`  ${(s.control.lost === 0 ? style.green : style.red)(style.bold(control))}`);
  return lines.join('\n');
}
