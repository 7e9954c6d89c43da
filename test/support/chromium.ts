// Headless Chromium, to measure how an SVG actually lays out (text widths come from real fonts).
import { execFile, execFileSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

/** The Chromium binary: $CHROMIUM, else the first of the usual names on PATH; null when there is none. */
export function findChromium(): string | null {
  const candidates = [process.env.CHROMIUM, 'chromium', 'chromium-browser', 'google-chrome', 'google-chrome-stable'];
  for (const c of candidates) {
    if (!c) continue;
    try {
      execFileSync(c, ['--version'], { stdio: 'ignore', timeout: 20_000 });
      return c;
    } catch {
      // not this one
    }
  }
  return null;
}

export interface Box {
  l: number;
  t: number;
  r: number;
  b: number;
}
export interface SvgLayout {
  root: Box;
  /** Every non-empty text element that is not part of a marker symbol. */
  labels: (Box & { text: string })[];
  /** Lines that must not run through a label: the expiry line's segments and the increment ticks. */
  lines: (Box & { cls: string })[];
  /** Each increment tick with the bar it belongs to. */
  ticks: { token: string; bar: Box; tick: Box }[];
  /** The markup of each marker symbol, by class, in the chart and in the legend. */
  symbols: { cls: string; inLegend: boolean; shapes: string[] }[];
}

/** Lays each SVG out in one page and returns the boxes the browser computed (CSS pixels). */
export async function layoutSvgs(chromium: string, svgs: string[]): Promise<SvgLayout[]> {
  const dir = await mkdtemp(join(tmpdir(), 'pgfence-svg-layout-'));
  try {
    const script = `
      const box = (e) => { const r = e.getBoundingClientRect(); return { l: r.left, t: r.top, r: r.right, b: r.bottom }; };
      let out;
      try { out = [...document.querySelectorAll('body > div > svg')].map((svg) => ({
        root: box(svg),
        labels: [...svg.querySelectorAll('text')].filter((t) => t.textContent.trim() !== '' && !t.closest('.symbol'))
          .map((t) => ({ text: t.textContent, ...box(t) })),
        lines: [...svg.querySelectorAll('line.expiry-line, g.expiry line, g.holding line')].map((l) => ({ cls: l.getAttribute('class') || (l.closest('.expiry') ? 'expiry-line' : 'tick'), ...box(l) })),
        ticks: [...svg.querySelectorAll('g.holding')].flatMap((g) => {
          const bar = box(g.querySelector('rect.bar') || g.querySelector('rect:last-of-type'));
          return [...g.querySelectorAll('line')].map((t) => ({ token: g.getAttribute('data-token'), bar, tick: box(t) }));
        }),
        symbols: [...svg.querySelectorAll('g.symbol')].map((g) => ({
          cls: g.getAttribute('class'),
          inLegend: g.closest('.legend') !== null,
          shapes: [...g.children].map((c) => c.tagName + ':' + (c.getAttribute('fill') || c.getAttribute('stroke') || '') + ':' + (c.tagName === 'text' ? c.textContent : '')),
        })),
      })); } catch (e) { out = { error: String(e && e.stack || e) }; }
      document.body.setAttribute('data-layout', btoa(unescape(encodeURIComponent(JSON.stringify(out)))));`;
    const html = `<!doctype html><html><body style="margin:0">${svgs.map((s) => `<div>${s}</div>`).join('\n')}<script>${script}</script></body></html>`;
    const page = join(dir, 'page.html');
    await writeFile(page, html);
    const args = [
      '--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
      '--disable-sync', '--no-first-run', '--mute-audio', `--user-data-dir=${join(dir, 'profile')}`, '--dump-dom', pathToFileURL(page).href,
    ];
    const dom = await new Promise<string>((resolve, reject) =>
      execFile(chromium, args, { timeout: 60_000, maxBuffer: 64 << 20 }, (err, stdout, stderr) =>
        err ? reject(new Error(`${chromium} failed: ${err.message}\n${stderr}`)) : resolve(stdout),
      ),
    );
    const m = /data-layout="([^"]+)"/.exec(dom);
    if (!m) throw new Error(`no layout in Chromium's DOM:\n${dom.slice(0, 2000)}`);
    const result = JSON.parse(Buffer.from(m[1]!, 'base64').toString('utf8')) as SvgLayout[] | { error: string };
    if (!Array.isArray(result)) throw new Error(`the layout script failed in Chromium: ${result.error}`);
    return result;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

const overlaps = (a: Box, b: Box, slack = 0) => a.l + slack < b.r && b.l + slack < a.r && a.t + slack < b.b && b.t + slack < a.b;

/** Every layout rule the timeline must keep, as messages (empty when all hold). */
export function layoutProblems(layout: SvgLayout): string[] {
  const problems: string[] = [];
  for (const label of layout.labels) {
    for (const line of layout.lines) {
      // A (zero-width, vertical) line crosses a label when it runs within 1px of the label's box.
      if (label.l - 1 < line.r && line.l < label.r + 1 && label.t < line.b && line.t < label.b) {
        problems.push(`a ${line.cls} at x=${line.l.toFixed(1)} crosses the label "${label.text}" (${label.l.toFixed(1)}..${label.r.toFixed(1)})`);
      }
    }
    const { root } = layout;
    if (label.l < root.l || label.r > root.r || label.t < root.t || label.b > root.b) problems.push(`the label "${label.text}" leaves the picture`);
  }
  layout.labels.forEach((a, i) =>
    layout.labels.slice(i + 1).forEach((b) => {
      if (overlaps(a, b, 0.5)) problems.push(`the labels "${a.text}" and "${b.text}" overlap`);
    }),
  );
  for (const { token, bar, tick } of layout.ticks) {
    // The tick is 2px wide: its centre must be at least 2px inside the bar for all of it to show.
    if (tick.l < bar.l + 2 || tick.r > bar.r - 2 || tick.t < bar.t || tick.b > bar.b) {
      problems.push(`an increment tick of token ${token} at x=${tick.l.toFixed(1)} is not inside its bar (${bar.l.toFixed(1)}..${bar.r.toFixed(1)})`);
    }
  }
  return problems;
}
