import type { WorkerEvent } from './protocol.js';

/** Lines of the story, as things happen. */
export interface Narrator {
  /** `who` is a worker name, 'db' or 'demo'; tone colours the text. */
  say(at: number, who: string, text: string, tone?: Tone): void;
}
export type Tone = 'plain' | 'good' | 'bad' | 'warn' | 'note' | 'strong';

/** A line about the frozen holder after it wakes: written once the whole wake-up is known. */
export interface WakeLine {
  at: number;
  text: () => string;
  tone: Tone;
}

export function describeFenced(f: { applied: boolean; reason?: string }): string {
  return f.applied ? 'applied' : `refused (${f.reason})`;
}

/** The story of the frozen holder's write once it wakes: the work it finishes, then what each table did. */
export function staleWriteLines(sentAt: number, ev: Extract<WorkerEvent, { type: 'wrote' }>): WakeLine[] {
  const lines: WakeLine[] = [];
  lines.push({
    at: sentAt,
    text: () =>
      `finishes the work it was frozen in. It had checked lease.signal.aborted just before that work: ${ev.abortedAtCheck}. ` +
      `The freeze came after the check, so nothing told it the lease was gone. It writes counter = ${ev.fenced.wanted} to both tables.`,
    tone: 'plain',
  });
  const f = ev.fenced;
  if (f.applied) {
    lines.push({ at: ev.doneAt, text: () => `fenced table: APPLIED (the fence did not hold!)`, tone: 'bad' });
  } else {
    const row = f.currentToken ? `token ${f.currentToken} in the row` : 'a newer token in the row';
    const stays = f.valueNow === undefined ? '' : ` The counter stays ${f.valueNow}.`;
    lines.push({
      at: ev.doneAt,
      text: () => `fenced table: REFUSED. fencedUpdate found ${row}, newer than ${ev.token}: a stale write, and PostgreSQL turned it away.${stays}`,
      tone: 'good',
    });
  }
  const c = ev.control;
  if (c.applied && c.overwrote !== undefined) {
    const whose = c.overwroteToken ? ` (written with token ${c.overwroteToken})` : '';
    const lost = c.overwrote - c.wanted + 1;
    lines.push({
      at: ev.doneAt,
      text: () =>
        `control table: APPLIED. The plain UPDATE silently replaced ${c.overwrote}${whose} with ${c.wanted}: ` +
        `${lost} increment${lost === 1 ? '' : 's'} by the new holders ${lost === 1 ? 'is' : 'are'} gone.`,
      tone: 'bad',
    });
  } else {
    lines.push({ at: ev.doneAt, text: () => `control table: not applied`, tone: 'plain' });
  }
  return lines;
}
