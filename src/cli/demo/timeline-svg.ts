import type { DemoRecord, Holding } from './record.js';
import type { Summary } from './summary.js';

/**
 * A standalone SVG timeline of a demo run: one lane per worker, a bar per lease holding (labelled
 * with its fencing token), the frozen stretch of the paused holder, markers for its stale writes
 * (refused by the fenced table, silently applied to the control table), and a time axis in seconds
 * since the demo started.
 */
export function timelineSvg(r: DemoRecord, s: Summary): string {
  const width = 960;
  const left = 120;
  const right = 30;
  const top = 104;
  const laneH = 64;
  const barH = 22;
  const plotW = width - left - right;
  const lanesBottom = top + r.workers.length * laneH;
  const legendTop = lanesBottom + 52;
  const height = legendTop + (tokensSkipped(s) ? 94 : 78);

  const times = [
    ...r.holdings.flatMap((h) => [h.grantedAt, h.releasedAt ?? h.grantedAt]),
    ...r.writes.flatMap((w) => [w.sentAt, w.doneAt]),
    ...(r.pause ? [r.pause.pausedAt, r.pause.resumedAt ?? r.pause.pausedAt] : []),
  ];
  const tStart = Math.min(...times) - 300;
  const tEnd = Math.max(...times, r.endAt ?? 0) + 300;
  const x = (t: number) => left + ((t - tStart) / (tEnd - tStart)) * plotW;
  const laneY = (worker: string) => top + r.workers.indexOf(worker) * laneH;
  const barY = (worker: string) => laneY(worker) + (laneH - barH) / 2;
  const secs = (t: number) => ((t - r.t0) / 1000).toFixed(2);
  const expiryX = r.pause?.dbExpiresAt !== undefined ? x(r.pause.dbExpiresAt) : null;
  const out: string[] = [];
  const push = (s: string) => out.push(s);

  push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" ` +
      `font-family="Helvetica, Arial, sans-serif" font-size="12">`,
  );
  push(`<title>pgfence demo: who held the lease, when</title>`);
  push(
    `<defs><pattern id="frozen" width="8" height="8" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">` +
      `<line x1="0" y1="0" x2="0" y2="8" stroke="#555" stroke-width="3" stroke-opacity="0.55"/></pattern></defs>`,
  );
  push(`<rect x="0" y="0" width="${width}" height="${height}" fill="#ffffff"/>`);
  push(`<text x="20" y="30" font-size="18" font-weight="bold" fill="#222">pgfence demo: who held the lease, when</text>`);
  const [fencedLine, controlLine] = headlineParts(s);
  push(
    `<text x="20" y="52" fill="#444">${esc(`${r.workers.length} workers increment one counter under a lease (ttl ${(r.ttlMs / 1000).toFixed(1)} s); every increment is written to a fenced table (fencedUpdate) and to an unfenced control table.`)}</text>`,
  );
  push(`<text x="20" y="72" fill="#2a7d2a" font-weight="bold">${esc(fencedLine)}</text>`);
  push(`<text x="${width / 2}" y="72" fill="#c0392b" font-weight="bold">${esc(controlLine)}</text>`);

  // Lanes.
  r.workers.forEach((worker, i) => {
    const y = laneY(worker);
    push(`<g class="lane" id="lane-${esc(worker)}">`);
    push(`<rect x="0" y="${y}" width="${width}" height="${laneH}" fill="${i % 2 ? '#ffffff' : '#f4f6f8'}"/>`);
    push(`<text x="20" y="${y + laneH / 2 + 5}" font-size="15" font-weight="bold" fill="#222">${esc(worker)}</text>`);
    if (r.pause?.worker === worker) {
      push(`<text x="20" y="${y + laneH / 2 + 20}" font-size="10" fill="#666">${r.pause.how === 'stop' ? 'SIGSTOPped' : 'blocked'}</text>`);
    }
    if (!r.holdings.some((h) => h.worker === worker)) {
      // A worker that asked for the lease all along but always found it taken: say so, or the lane looks broken.
      const text = `${worker} never got the lease: another worker always held it`;
      push(`<text x="${fmt(clear(left + 8, textWidth(text), expiryX))}" y="${y + laneH / 2 + 4}" fill="#666" font-style="italic">${esc(text)}</text>`);
    }
    push(`</g>`);
  });

  // Time axis.
  const axisY = lanesBottom + 8;
  push(`<g class="axis">`);
  push(`<line x1="${left}" y1="${axisY}" x2="${width - right}" y2="${axisY}" stroke="#333"/>`);
  const span = (tEnd - tStart) / 1000;
  const step = span > 24 ? 4 : span > 12 ? 2 : span > 5 ? 1 : 0.5;
  for (let s0 = Math.ceil((tStart - r.t0) / 1000 / step) * step; r.t0 + s0 * 1000 <= tEnd; s0 += step) {
    const tx = x(r.t0 + s0 * 1000);
    push(`<line x1="${fmt(tx)}" y1="${top}" x2="${fmt(tx)}" y2="${lanesBottom}" stroke="#000" stroke-opacity="0.06"/>`);
    push(`<line x1="${fmt(tx)}" y1="${axisY}" x2="${fmt(tx)}" y2="${axisY + 5}" stroke="#333"/>`);
    push(`<text x="${fmt(tx)}" y="${axisY + 18}" text-anchor="middle" fill="#333">+${Number(s0.toFixed(1))}s</text>`);
  }
  push(`<text x="${width - right}" y="${axisY + 34}" text-anchor="end" fill="#666">seconds since the demo started</text>`);
  push(`</g>`);

  // The moment the frozen holder's lease ran out in the database.
  // It stops at the frozen holder's lane: there the expired stretch of its bar starts at that moment,
  // and the lane's labels (frozen, SIGCONT, the stale writes) stay clear of it.
  if (r.pause?.dbExpiresAt !== undefined && expiryX !== null) {
    const ex = expiryX;
    const skipTop = laneY(r.pause.worker);
    const skipBottom = skipTop + laneH;
    push(`<g class="expiry">`);
    for (const [y1, y2] of [[top - 6, skipTop], [skipBottom, lanesBottom]] as const) {
      if (y2 > y1) push(`<line class="expiry-line" x1="${fmt(ex)}" y1="${y1}" x2="${fmt(ex)}" y2="${y2}" stroke="#c0392b" stroke-dasharray="4 3"/>`);
    }
    const label = `${r.pause.worker}'s lease (token ${r.pause.token}) expires in the database, +${secs(r.pause.dbExpiresAt)}s`;
    const atEnd = ex + 4 + textWidth(label, 11) > width - 10;
    push(`<text x="${fmt(atEnd ? ex - 4 : ex + 4)}" y="${top - 8}"${atEnd ? ' text-anchor="end"' : ''} fill="#c0392b" font-size="11">${esc(label)}</text>`);
    push(`</g>`);
  }

  // Holdings.
  for (const h of r.holdings) push(holdingSvg(h));

  // The frozen stretch.
  if (r.pause) {
    const p = r.pause;
    const y = barY(p.worker);
    const x0 = x(p.pausedAt);
    const x1 = x(p.resumedAt ?? tEnd);
    const frozenMs = (p.resumedAt ?? tEnd) - p.pausedAt;
    push(`<g class="frozen">`);
    push(`<rect x="${fmt(x0)}" y="${y}" width="${fmt(Math.max(1, x1 - x0))}" height="${barH}" fill="url(#frozen)" stroke="#555"/>`);
    const halo = 'fill="#222" stroke="#fff" stroke-width="3" paint-order="stroke"';
    const ty = y + barH / 2 + 4;
    // The moments it was frozen and woken (SIGSTOP, SIGCONT) at the stretch's ends, its length in between.
    const [from, to] = p.how === 'stop' ? ['SIGSTOP', 'SIGCONT'] : ['blocked', 'unblocked'];
    const middle = `frozen ${(frozenMs / 1000).toFixed(1)} s`;
    const ends = p.resumedAt !== undefined && x1 - x0 >= textWidth(`${from} ${middle} ${to}`, 12, true) + 40;
    if (ends) {
      push(`<text x="${fmt(x0 + 6)}" y="${ty}" font-weight="bold" ${halo}>${from}</text>`);
      push(`<text x="${fmt(x1 - 6)}" y="${ty}" text-anchor="end" font-weight="bold" ${halo}>${to}</text>`);
    }
    push(`<text x="${fmt((x0 + x1) / 2)}" y="${ty}" text-anchor="middle" font-weight="bold" ${halo}>${esc(ends || p.how !== 'stop' ? middle : `${middle} (SIGSTOP)`)}</text>`);
    push(`<title>${esc(`${p.worker} frozen from +${secs(p.pausedAt)}s to +${p.resumedAt ? secs(p.resumedAt) : '?'}s, right after it read counter = ${p.readValue}`)}</title>`);
    push(`</g>`);
  }

  // Stale writes: one marker per table.
  for (const w of r.writes.filter((w) => w.stale)) {
    const wx = x(w.sentAt);
    const y = barY(w.worker);
    const anchorEnd = wx > width - 330;
    const tx = anchorEnd ? wx - 14 : wx + 14;
    const anchor = anchorEnd ? 'end' : 'start';
    const fy = y - 9;
    push(`<g class="marker refused">`);
    if (!w.fenced.applied) {
      push(refusedSymbol(wx, fy, 8));
      push(
        `<text x="${fmt(tx)}" y="${fy + 4}" text-anchor="${anchor}" fill="#2a7d2a" font-weight="bold">${esc(`fenced write refused: token ${w.token} is stale${w.fenced.currentToken ? ` (row has ${w.fenced.currentToken})` : ''}`)}</text>`,
      );
    } else {
      push(`<circle cx="${fmt(wx)}" cy="${fy}" r="8" fill="#c0392b"/>`);
      push(`<text x="${fmt(tx)}" y="${fy + 4}" text-anchor="${anchor}" fill="#c0392b" font-weight="bold">fenced write APPLIED (unexpected)</text>`);
    }
    push(`</g>`);
    const cy = y + barH + 10;
    push(`<g class="marker overwrite">`);
    if (w.control.applied) {
      push(overwriteSymbol(wx, cy, 9));
      const what = w.control.overwrote !== undefined ? `${w.control.overwrote} -> ${w.control.wanted}` : `-> ${w.control.wanted}`;
      push(`<text x="${fmt(tx)}" y="${cy + 5}" text-anchor="${anchor}" fill="#c0392b" font-weight="bold">${esc(`control write silently overwrote ${what}`)}</text>`);
    }
    push(`</g>`);
  }

  // Legend.
  const ly = legendTop;
  push(`<g class="legend" font-size="11" fill="#333">`);
  push(`<rect x="20" y="${ly}" width="34" height="14" rx="3" fill="#3b6ea8"/><text x="60" y="${ly + 11}">lease held (above it: its fencing token)</text>`);
  push(`<rect x="20" y="${ly + 22}" width="34" height="14" rx="3" fill="#3b6ea8"/><line x1="37" y1="${ly + 25}" x2="37" y2="${ly + 33}" stroke="#fff" stroke-width="2"/><text x="60" y="${ly + 33}">tick: one increment written</text>`);
  push(`<rect x="290" y="${ly}" width="34" height="14" fill="url(#frozen)" stroke="#555"/><text x="330" y="${ly + 11}">process frozen</text>`);
  push(`<rect x="290" y="${ly + 22}" width="34" height="14" rx="3" fill="#fdecea" stroke="#c0392b" stroke-dasharray="4 3"/><text x="330" y="${ly + 33}">lease expired, holder does not know</text>`);
  push(`${refusedSymbol(567, ly + 7, 8)}<text x="582" y="${ly + 11}">stale write refused by the fenced table</text>`);
  push(`${overwriteSymbol(567, ly + 29, 9)}<text x="582" y="${ly + 33}">stale write silently applied (control table)</text>`);
  push(`<text x="20" y="${ly + 60}" fill="#666">${esc(`Generated by pgfence demo from what happened: ${s.grants} lease grants, ${r.writes.length} write pairs.`)}</text>`);
  if (tokensSkipped(s)) {
    push(`<text x="20" y="${ly + 76}" fill="#666">${esc(`Tokens ${s.firstToken} to ${s.lastToken} for ${s.grants} grants: a worker that raced for a free lease and lost drew a number too. Only their order matters.`)}</text>`);
  }
  push(`</g>`);
  push(`</svg>`);
  return `${out.join('\n')}\n`;

  function holdingSvg(h: Holding): string {
    const y = barY(h.worker);
    const end = h.releasedAt ?? tEnd;
    const isPaused = r.pause?.worker === h.worker && r.pause.token === h.token;
    const validEnd = isPaused && r.pause?.dbExpiresAt !== undefined ? Math.min(end, r.pause.dbExpiresAt) : end;
    const x0 = x(h.grantedAt);
    const x1 = x(validEnd);
    const parts: string[] = [`<g class="holding" data-worker="${esc(h.worker)}" data-token="${h.token}">`];
    parts.push(`<title>${esc(`${h.worker} holds the lease with token ${h.token}, from +${secs(h.grantedAt)}s to +${secs(end)}s`)}</title>`);
    if (isPaused && validEnd < end) {
      const z0 = x(validEnd);
      parts.push(`<rect x="${fmt(z0)}" y="${y}" width="${fmt(Math.max(1, x(end) - z0))}" height="${barH}" rx="3" fill="#fdecea" stroke="#c0392b" stroke-dasharray="4 3"/>`);
    }
    parts.push(`<rect class="bar" x="${fmt(x0)}" y="${y}" width="${fmt(Math.max(2, x1 - x0))}" height="${barH}" rx="3" fill="#3b6ea8"/>`);
    for (const w of h.writes) {
      if (w.stale || w.sentAt > validEnd || x1 - x0 < 8) continue;
      // The last increment is sent as the lease is released: on the bar's edge its tick would not show.
      const wx = Math.min(Math.max(x(w.sentAt), x0 + 4), x1 - 4);
      parts.push(`<line class="tick" x1="${fmt(wx)}" y1="${y + 4}" x2="${fmt(wx)}" y2="${y + barH - 4}" stroke="#fff" stroke-width="2" stroke-opacity="0.8"/>`);
    }
    // The label sits above the bar: inside, the increments' ticks (and a frozen stretch) would cross it.
    // A grant at the moment the frozen holder's lease expired starts on the expiry line: the label moves off it.
    const label = `token ${h.token}`;
    parts.push(`<text x="${fmt(clear(x0, textWidth(label, 12, true), expiryX))}" y="${y - 5}" fill="#3b6ea8" font-weight="bold">${esc(label)}</text>`);
    parts.push(`</g>`);
    return parts.join('');
  }
}

/** Whether the grants' tokens skip numbers (contenders that lost a race for the lease drew some). */
function tokensSkipped(s: Summary): boolean {
  return s.firstToken !== null && s.lastToken !== null && Number(s.lastToken - s.firstToken) + 1 > s.grants;
}

/** The refused-write marker (a ✗ on green), the same in the chart and in the legend. */
function refusedSymbol(cx: number, cy: number, r: number): string {
  const a = r / 2;
  return (
    `<g class="symbol refused"><circle cx="${fmt(cx)}" cy="${fmt(cy)}" r="${r}" fill="#2a7d2a"/>` +
    `<path d="M${fmt(cx - a)} ${fmt(cy - a)} L${fmt(cx + a)} ${fmt(cy + a)} M${fmt(cx + a)} ${fmt(cy - a)} L${fmt(cx - a)} ${fmt(cy + a)}" stroke="#fff" stroke-width="2"/></g>`
  );
}

/** The silently-applied marker (a ! on an orange triangle), the same in the chart and in the legend. */
function overwriteSymbol(cx: number, cy: number, r: number): string {
  return (
    `<g class="symbol overwrite"><path d="M${fmt(cx)} ${fmt(cy - r)} L${fmt(cx + r)} ${fmt(cy + 7)} L${fmt(cx - r)} ${fmt(cy + 7)} Z" fill="#e67e22"/>` +
    `<text x="${fmt(cx)}" y="${fmt(cy + 5)}" text-anchor="middle" fill="#fff" font-weight="bold" font-size="11">!</text></g>`
  );
}

/**
 * A generous estimate of a text's width (no font metrics here): wide enough for DejaVu Sans, the
 * usual fallback for Helvetica and Arial, so labels placed with it stay clear of lines and each other.
 */
function textWidth(text: string, fontSize = 12, bold = false): number {
  return text.length * fontSize * (bold ? 0.64 : 0.6);
}

/**
 * Where a label starting at `x` goes so that it stays clear of a vertical line at `lineX` (4px each
 * side): past the line, or before it when past it would leave the picture (`maxRight`).
 */
function clear(x: number, width: number, lineX: number | null, maxRight = 950): number {
  if (lineX === null || lineX < x - 4 || lineX > x + width + 4) return x;
  return lineX + 5 + width <= maxRight ? lineX + 5 : Math.max(0, lineX - 5 - width);
}

function headlineParts(s: Summary): [string, string] {
  const p = (n: number, one: string) => `${n} ${one}${n === 1 ? '' : 's'}`;
  return [
    `fenced table: ${p(s.fenced.lost, 'lost update')} (${p(s.fenced.staleRefused, 'stale write')} refused)`,
    `unfenced control table: ${p(s.control.lost, 'lost update')}`,
  ];
}

function fmt(n: number): string {
  return Number.isFinite(n) ? n.toFixed(1) : '0';
}

function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}
