/** Terminal output of the demo: 80 columns, colours only on a TTY without NO_COLOR. */

export const WIDTH = 80;

export interface Style {
  bold(s: string): string;
  dim(s: string): string;
  red(s: string): string;
  green(s: string): string;
  yellow(s: string): string;
  cyan(s: string): string;
  magenta(s: string): string;
}

export function makeStyle(enabled: boolean): Style {
  const wrap = (open: number, close: number) => (s: string) => (enabled ? `\x1b[${open}m${s}\x1b[${close}m` : s);
  return {
    bold: wrap(1, 22),
    dim: wrap(2, 22),
    red: wrap(31, 39),
    green: wrap(32, 39),
    yellow: wrap(33, 39),
    cyan: wrap(36, 39),
    magenta: wrap(35, 39),
  };
}

export function colourWanted(stream: NodeJS.WriteStream): boolean {
  return Boolean(stream.isTTY) && !process.env.NO_COLOR;
}

/** Visible length (without ANSI sequences). */
function visibleLength(s: string): number {
  return [...s.replace(/\x1b\[[0-9;]*m/g, '')].length;
}

/**
 * Word-wraps `text` (which may contain ANSI sequences, never inside a word) to `width` columns; the
 * first line gets `first` as prefix, the others `indent` spaces.
 */
export function wrap(text: string, width: number, first: string, indent: number): string {
  const words = text.split(' ');
  const lines: string[] = [];
  let line = first;
  let lineLen = visibleLength(first);
  let empty = true;
  for (const word of words) {
    const len = visibleLength(word);
    if (!empty && lineLen + 1 + len > width) {
      lines.push(line);
      line = ' '.repeat(indent) + word;
      lineLen = indent + len;
      continue;
    }
    line += (empty ? '' : ' ') + word;
    lineLen += (empty ? 0 : 1) + len;
    empty = false;
  }
  lines.push(line);
  return lines.join('\n');
}

/** "+12.34s" for a time relative to the demo's start. */
export function rel(ms: number): string {
  return `+${(ms / 1000).toFixed(2)}s`;
}

