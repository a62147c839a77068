// Speed of the web UI on the big benchmark trace (not a test): page open to timeline drawn
// (from the bench's goto to the first paint by the page's clock; right after processing, then
// again in a new tab),
// time from the timeline data arriving to the timeline drawn, and redraw time per pan/zoom
// step, in headless Chromium.
import { readFileSync } from 'node:fs';
import { chromium } from 'playwright-core';

const base = process.env.MEMLENS_URL;
const file = process.env.MEMLENS_BENCH_FILE;
const flags = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

const form = new FormData();
form.append('file', new Blob([readFileSync(file)]), file.split('/').pop());
let t = Date.now();
const r = await fetch(`${base}/api/reports`, { method: 'POST', body: form });
const { id, url } = await r.json();
for (;;) {
  const s = await (await fetch(`${base}/api/reports/${id}/status`)).json();
  if (s.state === 'ready') break;
  if (s.state === 'failed') throw new Error(s.error);
  await new Promise(res => setTimeout(res, 200));
}
console.log(`upload + processing: ${((Date.now() - t) / 1000).toFixed(2)} s`);

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', args: flags, headless: true });
const context = await browser.newContext({ viewport: { width: 1600, height: 1000 } });
const page = await context.newPage();
// Waits for the first timeline on screen, checking at every animation frame: waitForSelector
// polls at growing intervals (20, 50, 100, 100, 500 ms after a first check), which added up to
// 150 ms to the figure. Returns ms from `since` (Date.now()) to the paint by the page's own
// clock, and to the moment this process saw it.
async function openedToPainted(p, since) {
  await p.waitForFunction(() => document.querySelector('#timeline[data-painted-at]') !== null, null, { polling: 'raf', timeout: 120_000 });
  const seen = Date.now() - since;
  const painted = await p.evaluate(() => performance.timeOrigin + Number(document.querySelector('#timeline').dataset.paintedAt));
  return { painted: painted - since, seen };
}
t = Date.now();
await page.goto(`${base}${url}`);
const opened = await openedToPainted(page, t);
const first = await page.evaluate(() => {
  const c = document.querySelector('#timeline');
  return { toDrawn: Number(c.dataset.dataToDrawnMs), draw: Number(c.dataset.drawMs) };
});
console.log(`page open → timeline drawn: ${(opened.painted / 1000).toFixed(2)} s (report just processed; seen by the bench at ${(opened.seen / 1000).toFixed(2)} s)`);
// Where a first paint's time went: each request's start and end, from navigation start.
async function whereTimeWent(p) {
  const requests = await p.evaluate(() => performance.getEntriesByType('resource')
    .map(e => ({ name: new URL(e.name).pathname + new URL(e.name).search, start: e.startTime, end: e.responseEnd, bytes: e.transferSize }))
    .filter(e => e.start < Number(document.querySelector('#timeline').dataset.dataAt || 1e9) + 50));
  const inPage = await p.evaluate(() => ({
    html: performance.getEntriesByType('navigation')[0].responseEnd,
    drawn: Number(document.querySelector('#timeline').dataset.dataAt) + Number(document.querySelector('#timeline').dataset.dataToDrawnMs),
    painted: Number(document.querySelector('#timeline').dataset.paintedAt),
  }));
  console.log(`  in the page, from navigation start: html by ${inPage.html.toFixed(0)} ms, timeline drawn by ${inPage.drawn.toFixed(0)} ms, painted by ${inPage.painted.toFixed(0)} ms`);
  for (const r of requests) {
    console.log(`  ${r.start.toFixed(0).padStart(5)}–${r.end.toFixed(0).padStart(5)} ms  ${(r.bytes / 1024).toFixed(0).padStart(6)} KiB  ${r.name.slice(0, 90)}`);
  }
}
await whereTimeWent(page);
// Opened again in a new tab once the first is idle (its segment map read the whole trace).
await page.waitForSelector('#segment-summary', { timeout: 120_000 });
await page.waitForLoadState('networkidle');
{
  // In the same browser context as the first (its HTTP cache warm, as a second link opened later).
  const again = await context.newPage();
  const t2 = Date.now();
  await again.goto(`${base}${url}`);
  const reopened = await openedToPainted(again, t2);
  console.log(`page open again → timeline drawn: ${(reopened.painted / 1000).toFixed(2)} s (browser cache warm; seen by the bench at ${(reopened.seen / 1000).toFixed(2)} s)`);
  await whereTimeWent(again);
  await again.close();
}
console.log(`data arrived → drawn: ${first.toDrawn.toFixed(1)} ms (last draw ${first.draw.toFixed(1)} ms)`);

// Each wheel/keyboard step redraws synchronously from loaded data; measure frame-to-frame time
// with requestAnimationFrame around a burst of steps.
async function burst(kind, n) {
  return page.evaluate(async ({ kind, n }) => {
    const c = document.querySelector('#timeline');
    c.focus();
    const r = c.getBoundingClientRect();
    const times = [];
    for (let i = 0; i < n; i++) {
      const t0 = performance.now();
      if (kind === 'zoom') {
        c.dispatchEvent(new WheelEvent('wheel', { deltaY: i % 2 ? 120 : -120, clientX: r.left + r.width * 0.6, clientY: r.top + 100, bubbles: true, cancelable: true }));
      } else {
        c.dispatchEvent(new KeyboardEvent('keydown', { key: i % 2 ? 'ArrowLeft' : 'ArrowRight', bubbles: true, cancelable: true }));
      }
      await new Promise(res => requestAnimationFrame(() => res()));
      times.push(performance.now() - t0);
    }
    times.sort((a, b) => a - b);
    const mean = times.reduce((a, b) => a + b, 0) / n;
    return { mean, p95: times[Math.floor(n * 0.95)], fps: 1000 / mean };
  }, { kind, n });
}
for (const kind of ['zoom', 'pan']) {
  const s = await burst(kind, 120);
  console.log(`${kind}: ${s.fps.toFixed(0)} frames/s (mean ${s.mean.toFixed(1)} ms, p95 ${s.p95.toFixed(1)} ms per step)`);
}
await page.screenshot({ path: `${process.env.MEMLENS_E2E_OUT || 'out'}/bench.png`, fullPage: false });
await browser.close();
