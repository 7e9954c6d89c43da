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
  const height = legendTop + 78;

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
  if (r.pause?.dbExpiresAt !== undefined) {
    const ex = x(r.pause.dbExpiresAt);
    push(`<g class="expiry">`);
    push(`<line x1="${fmt(ex)}" y1="${top - 6}" x2="${fmt(ex)}" y2="${lanesBottom}" stroke="#c0392b" stroke-dasharray="4 3"/>`);
    push(`<text x="${fmt(ex + 4)}" y="${top - 8}" fill="#c0392b" font-size="11">${esc(`${r.pause.worker}'s lease (token ${r.pause.token}) expires in the database, +${secs(r.pause.dbExpiresAt)}s`)}</text>`);
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
    push(
      `<text x="${fmt((x0 + x1) / 2)}" y="${y + barH / 2 + 4}" text-anchor="middle" font-weight="bold" fill="#222" stroke="#fff" stroke-width="3" paint-order="stroke">${esc(`frozen ${(frozenMs / 1000).toFixed(1)} s${p.how === 'stop' ? ' (SIGSTOP)' : ''}`)}</text>`,
    );
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
      push(`<circle cx="${fmt(wx)}" cy="${fy}" r="8" fill="#2a7d2a"/>`);
      push(`<path d="M${fmt(wx - 4)} ${fy - 4} L${fmt(wx + 4)} ${fy + 4} M${fmt(wx + 4)} ${fy - 4} L${fmt(wx - 4)} ${fy + 4}" stroke="#fff" stroke-width="2"/>`);
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
      push(`<path d="M${fmt(wx)} ${cy - 9} L${fmt(wx + 9)} ${cy + 7} L${fmt(wx - 9)} ${cy + 7} Z" fill="#e67e22"/>`);
      push(`<text x="${fmt(wx)}" y="${cy + 5}" text-anchor="middle" fill="#fff" font-weight="bold" font-size="11">!</text>`);
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
  push(`<circle cx="567" cy="${ly + 7}" r="7" fill="#2a7d2a"/><text x="582" y="${ly + 11}">stale write refused by the fenced table</text>`);
  push(`<path d="M567 ${ly + 21} L575 ${ly + 36} L559 ${ly + 36} Z" fill="#e67e22"/><text x="582" y="${ly + 33}">stale write silently applied (control table)</text>`);
  push(`<text x="20" y="${ly + 60}" fill="#666">${esc(`Generated by pgfence demo from what actually happened: ${s.grants} lease grants, ${r.writes.length} write pairs.`)}</text>`);
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
    parts.push(`<rect x="${fmt(x0)}" y="${y}" width="${fmt(Math.max(2, x1 - x0))}" height="${barH}" rx="3" fill="#3b6ea8"/>`);
    for (const w of h.writes) {
      if (w.stale || w.sentAt > validEnd) continue;
      const wx = x(w.sentAt);
      parts.push(`<line x1="${fmt(wx)}" y1="${y + 4}" x2="${fmt(wx)}" y2="${y + barH - 4}" stroke="#fff" stroke-width="2" stroke-opacity="0.8"/>`);
    }
    // The label sits above the bar: inside, the increments' ticks (and a frozen stretch) would cross it.
    parts.push(`<text x="${fmt(x0)}" y="${y - 5}" fill="#3b6ea8" font-weight="bold">${esc(`token ${h.token}`)}</text>`);
    parts.push(`</g>`);
    return parts.join('');
  }
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
