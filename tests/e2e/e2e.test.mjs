// End-to-end tests of the web UI in Debian's headless Chromium, driven by playwright-core.
// Needs a running `memlens serve` (MEMLENS_URL) with the built frontend; scripts/e2e starts one.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const base = process.env.MEMLENS_URL;
const traces = process.env.MEMLENS_TRACES;
const out = process.env.MEMLENS_E2E_OUT || 'out';
const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';
const flags = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

let browser;
before(async () => {
  assert.ok(base, 'MEMLENS_URL must point at a running memlens server');
  mkdirSync(out, { recursive: true });
  browser = await chromium.launch({ executablePath, args: flags, headless: true });
});
after(async () => { await browser?.close(); });

/** Fraction of the timeline canvas's plot area that is not background white. */
async function drawnFraction(page) {
  return page.evaluate(() => {
    const c = document.querySelector('#timeline');
    const ctx = c.getContext('2d');
    const { data } = ctx.getImageData(80, 30, c.width - 100, c.height - 60);
    let painted = 0;
    for (let i = 0; i < data.length; i += 4) {
      if (data[i] < 245 || data[i + 1] < 245 || data[i + 2] < 245) painted++;
    }
    return painted / (data.length / 4);
  });
}

async function waitForTimeline(page) {
  await page.waitForSelector('#timeline[data-data-at]', { timeout: 60_000 });
}

async function uploadViaApi(name, bytes) {
  const form = new FormData();
  form.append('file', new Blob([bytes]), name);
  const r = await fetch(`${base}/api/reports`, { method: 'POST', body: form });
  assert.equal(r.status, 201);
  return r.json();
}

test('upload a real trace through the page, see the report, share it, delete it', async () => {
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page = await ctx.newPage();
  await page.goto(`${base}/`);
  const created = page.waitForResponse(r => r.url().endsWith('/api/reports') && r.request().method() === 'POST');
  const segmentsAnswered = page.waitForResponse(r => r.url().includes('/segments?'), { timeout: 120_000 });
  await page.setInputFiles('#file-input', join(traces, 'leak.pickle'));
  const { id, url, delete_token } = await (await created).json();
  await page.waitForURL(`**/r/${id}**`, { timeout: 60_000 });

  // The peak card shows PyTorch's own number: requested_bytes.all.peak = 574292172 B.
  await page.waitForSelector('#peak-value', { timeout: 60_000 });
  assert.equal(await page.textContent('#peak-value'), '547.7 MiB');
  await waitForTimeline(page);
  const painted = await drawnFraction(page);
  assert.ok(painted > 0.2, `timeline mostly blank: ${painted}`);
  await page.waitForSelector('#segment-summary', { timeout: 60_000 });
  // The segment map is asked for at the panel's level of detail; its summary counts every
  // segment of the state, drawn or not.
  const segments = await segmentsAnswered;
  const asked = new URL(segments.url()).searchParams;
  assert.equal(asked.get('max_segments'), '80');
  assert.ok(Number(asked.get('width')) >= 230, `bar width ${asked.get('width')}`);
  const map = await segments.json();
  assert.ok(map.segments.length <= 80 && map.segment_count >= map.segments.length);
  assert.match(await page.textContent('#segment-summary'), new RegExp(`: ${map.segment_count} segments,`));
  assert.match(await page.textContent('#leaks'), /per iteration/);
  // What the peak is made of, by category (Adam's two states beside the parameters).
  assert.match(await page.textContent('#budget'), /parameter — 48\.1 MiB at the peak/);
  assert.match(await page.textContent('#budget'), /optimizer_state — 96\.2 MiB at the peak/);
  await page.screenshot({ path: join(out, 'report.png'), fullPage: true });

  // Hover a band: its size, lifetime and stack appear (the verdict above the timeline may push
  // its lower part out of the window).
  await page.locator('#timeline').scrollIntoViewIfNeeded();
  const box = await page.locator('#timeline').boundingBox();
  await page.mouse.move(box.x + box.width * 0.9, box.y + box.height * 0.85);
  await page.waitForSelector('#band-detail', { timeout: 10_000 });

  // Zooming fetches level-of-detail data and puts the view in the URL.
  await page.mouse.wheel(0, -400);
  await page.waitForFunction(() => location.search.includes('start='), null, { timeout: 10_000 });
  const shared = page.url();

  // The share link opens the same report and view in a fresh browser context.
  const ctx2 = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page2 = await ctx2.newPage();
  await page2.goto(shared);
  await page2.waitForSelector('#peak-value', { timeout: 60_000 });
  assert.equal(await page2.textContent('#peak-value'), '547.7 MiB');
  assert.equal(await page2.textContent('#report-title'), 'leak.pickle');
  await waitForTimeline(page2);
  const start = new URL(shared).searchParams.get('start');
  await page2.waitForFunction(s => new URL(location.href).searchParams.get('start') === s, start, { timeout: 10_000 });
  await ctx2.close();

  // After deletion the link shows a readable error page.
  const del = await fetch(`${base}/api/reports/${id}`, { method: 'DELETE', headers: { 'X-Delete-Token': delete_token } });
  assert.equal(del.status, 204);
  const ctx3 = await browser.newContext();
  const page3 = await ctx3.newPage();
  await page3.goto(`${base}${url}`);
  await page3.waitForSelector('#report-error', { timeout: 30_000 });
  assert.match(await page3.textContent('#report-error'), /Report not found/);
  await ctx3.close();
  await ctx.close();
});

test('the UI works under its Content-Security-Policy, with no violation on the way', async () => {
  const { url } = await uploadFilesViaApi(['labels.pickle']);
  const ctx = await browser.newContext();
  const page = await ctx.newPage();
  await page.addInitScript(() => {
    window.__cspViolations = [];
    document.addEventListener('securitypolicyviolation', (e) => {
      window.__cspViolations.push(`${e.violatedDirective} ${e.blockedURI}`);
    });
  });
  const errors = [];
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  const res = await page.goto(`${base}${url}`);
  const csp = res.headers()['content-security-policy'] || '';
  assert.match(csp, /frame-ancestors 'none'/);
  assert.match(csp, /script-src 'self' 'wasm-unsafe-eval' 'sha256-/);
  assert.equal(res.headers()['x-content-type-options'], 'nosniff');
  await waitForTimeline(page);
  await page.waitForSelector('#budget', { timeout: 30_000 });
  // Hover a band: its stack and user metadata load through the API.
  const box = await page.locator('#timeline').boundingBox();
  await page.mouse.move(box.x + box.width * 0.5, box.y + box.height * 0.8);
  await page.waitForTimeout(500);
  const violations = await page.evaluate(() => window.__cspViolations);
  assert.deepEqual(violations, [], `CSP violations: ${violations.join('; ')}`);
  assert.deepEqual(errors.filter((e) => /Content Security Policy/i.test(e)), []);
  await ctx.close();
});

test('dropping files on the page uploads them', async () => {
  const ctx = await browser.newContext();
  const page = await ctx.newPage();
  await page.goto(`${base}/`);
  const bytes = [...readFileSync(join(traces, 'mlp_train.pickle'))];
  const drop = await page.evaluateHandle((data) => {
    const dt = new DataTransfer();
    dt.items.add(new File([new Uint8Array(data)], 'mlp_train.pickle'));
    return dt;
  }, bytes);
  await page.dispatchEvent('.dropzone', 'drop', { dataTransfer: drop });
  await page.waitForURL('**/r/**', { timeout: 60_000 });
  await page.waitForSelector('#peak-value', { timeout: 60_000 });
  // requested_bytes.all.peak of mlp_train = 890933376 B.
  assert.equal(await page.textContent('#peak-value'), '849.7 MiB');
  // The report is now listed on the upload page of this browser.
  await page.goto(`${base}/`);
  assert.match(await page.textContent('.recent'), /mlp_train\.pickle/);
  await ctx.close();
});

test('a failed import shows its error page', async () => {
  const full = readFileSync(join(traces, 'mlp_train.pickle'));
  const { url } = await uploadViaApi('cut.pickle', full.subarray(0, 20_000));
  const ctx = await browser.newContext();
  const page = await ctx.newPage();
  await page.goto(`${base}${url}`);
  await page.waitForSelector('#report-error', { timeout: 60_000 });
  const text = await page.textContent('#report-error');
  assert.match(text, /could not be processed/);
  assert.match(text, /cut\.pickle: pickle: input ends at byte/);
  await ctx.close();
});

test('an OOM is marked and explained on click', async () => {
  const { url } = await uploadViaApi('oom_fragmentation.pickle', readFileSync(join(traces, 'oom_fragmentation.pickle')));
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page = await ctx.newPage();
  await page.goto(`${base}${url}`);
  await waitForTimeline(page);
  // Find the OOM marker's x from the summary and click it.
  const summary = await (await fetch(`${base}/api${url.replace('/r/', '/reports/')}`)).json();
  const dev = summary.files[0].devices[0];
  const oomTime = dev.ooms[1].time_us;
  const x = await page.evaluate((t) => {
    const c = document.querySelector('#timeline');
    const p = new URL(location.href).searchParams;
    const s = Number(p.get('start')), e = Number(p.get('end'));
    return 72 + (t - s) / (e - s) * (c.width - 72 - 12);
  }, oomTime);
  // The verdict and the OOM's section come first: the timeline may start below the window.
  await page.locator('#timeline').scrollIntoViewIfNeeded();
  const box = await page.locator('#timeline').boundingBox();
  await page.mouse.click(box.x + x, box.y + 100);
  await page.waitForSelector('#oom-detail', { timeout: 10_000 });
  assert.match(await page.textContent('#oom-detail'), /expandable_segments:True/);
  await page.screenshot({ path: join(out, 'oom.png'), fullPage: true });
  await ctx.close();
});

/** Whether an element lies wholly in the first screen (the viewport, nothing scrolled). */
async function inFirstScreen(page, selector) {
  return page.evaluate((sel) => {
    const r = document.querySelector(sel).getBoundingClientRect();
    return window.scrollY === 0 && r.top >= 0 && r.bottom <= window.innerHeight && r.height > 0;
  }, selector);
}

test('an at-OOM report leads with its verdict in the first screen, linked to the failure', async () => {
  const { url } = await uploadViaApi('fwd_jump.at_oom.pickle.gz', readFileSync(join(traces, 'oom', 'fwd_jump.at_oom.pickle.gz')));
  const ctx = await browser.newContext({ viewport: { width: 1440, height: 900 } });
  const page = await ctx.newPage();
  await page.goto(`${base}${url}`);
  await page.waitForSelector('#verdict', { timeout: 60_000 });
  assert.ok(await inFirstScreen(page, '#verdict'), 'the verdict is not in the first screen');
  const verdict = await page.textContent('#verdict');
  // Cause, phase, the biggest live category and the first remedy with its number.
  assert.match(verdict, /^Limit: /);
  assert.match(verdict, /in the forward/);
  assert.match(verdict, /biggest live category is activations \(14\.\d\d GiB\)/);
  assert.match(verdict, /raise the cap by at least [\d.]+ GiB; or run \d+ % of the batch/);
  await page.screenshot({ path: join(out, 'verdict_oom.png') });
  await waitForTimeline(page);
  await page.click('#verdict-timeline');
  await page.waitForSelector('#oom-detail', { timeout: 10_000 });
  await page.click('#verdict-segments');
  await page.waitForSelector('#segment-summary', { timeout: 60_000 });
  await ctx.close();
});

test('a leak report leads with its verdict in the first screen', async () => {
  const { url } = await uploadViaApi('leak.pickle', readFileSync(join(traces, 'leak.pickle')));
  const ctx = await browser.newContext({ viewport: { width: 1440, height: 900 } });
  const page = await ctx.newPage();
  await page.goto(`${base}${url}`);
  await page.waitForSelector('#verdict', { timeout: 60_000 });
  assert.ok(await inFirstScreen(page, '#verdict'), 'the verdict is not in the first screen');
  assert.match(await page.textContent('#verdict'), /^Leak: [\d.]+ MiB piles up per iteration from /);
  await ctx.close();
});

test('an OOM message pasted on the front page is explained', async () => {
  const message = readFileSync(join(traces, 'oom', 'fwd_first.error.txt'), 'utf8');
  const ctx = await browser.newContext({ viewport: { width: 1440, height: 900 } });
  const page = await ctx.newPage();
  await page.goto(`${base}/`);
  await page.fill('#paste-text', message);
  await page.click('#paste-go');
  await page.waitForURL('**/r/**', { timeout: 60_000 });
  await page.waitForSelector('#verdict', { timeout: 60_000 });
  assert.ok(await inFirstScreen(page, '#verdict'), 'the verdict is not in the first screen');
  const verdict = await page.textContent('#verdict');
  assert.match(verdict, /^Limit: the per-process cap of 13\.90 GiB stopped a 128\.0 MiB request in the forward/);
  assert.match(await page.textContent('#text-ooms'), /limit · forward/);
  assert.match(await page.textContent('#capture-next-time'), /memlens\.torch\.on_oom/);
  await page.screenshot({ path: join(out, 'pasted_oom.png') });
  await ctx.close();
});

test('an upload over the server limit is refused before it is sent', async () => {
  // The real server's limit, then one small enough for leak.pickle (343 KiB) to exceed it.
  const limits = await (await fetch(`${base}/api/limits`)).json();
  assert.ok(limits.max_upload_bytes > 0);
  const ctx = await browser.newContext();
  const page = await ctx.newPage();
  await page.route('**/api/limits', route => route.fulfill({
    contentType: 'application/json',
    body: JSON.stringify({ ...limits, max_upload_bytes: 100_000 }),
  }));
  let posted = false;
  page.on('request', r => { if (r.method() === 'POST') posted = true; });
  await page.goto(`${base}/`);
  await page.setInputFiles('#file-input', join(traces, 'leak.pickle'));
  await page.waitForSelector('#upload-error', { timeout: 10_000 });
  const text = await page.textContent('#upload-error');
  assert.match(text, /leak\.pickle \(343\.3 KiB\) is over this server's upload limit of 97\.7 KiB/);
  assert.equal(posted, false);
  await ctx.close();
});

async function uploadFilesViaApi(names) {
  const form = new FormData();
  for (const n of names) form.append('file', new Blob([readFileSync(join(traces, n))]), n);
  const r = await fetch(`${base}/api/reports`, { method: 'POST', body: form });
  assert.equal(r.status, 201);
  return r.json();
}

/** Pixels of the timeline plot in the NVML line's purple (117,80,123), antialiasing allowed. */
async function purplePixels(page) {
  return page.evaluate(() => {
    const c = document.querySelector('#timeline');
    const { data } = c.getContext('2d').getImageData(72, 26, c.width - 84, c.height - 52);
    let n = 0;
    for (let i = 0; i < data.length; i += 4) {
      const [r, g, b] = [data[i], data[i + 1], data[i + 2]];
      if (Math.abs(r - 117) < 30 && Math.abs(g - 80) < 30 && Math.abs(b - 123) < 30 && b > g + 20) n++;
    }
    return n;
  });
}

test('an NVML log uploaded with its snapshot joins the timeline and gets its own section', async () => {
  // The IST log's zone-less times are 5 h 30 min ahead; the report lines them up.
  const { url } = await uploadFilesViaApi(['gpt_train.pickle', 'nvidia_smi_gpu.ist.csv']);
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page = await ctx.newPage();
  await page.goto(`${base}${url}`);
  await waitForTimeline(page);
  await page.waitForSelector('.gpu-log .gpu-peak', { timeout: 30_000 });
  // awk over nvidia_smi_gpu.csv: max memory.used = 9915 MiB.
  assert.equal(await page.textContent('.gpu-log .gpu-peak .v'), '9.68 GiB');
  assert.match(await page.textContent('.gpu-log'), /shifted -330 min to line up with the snapshot/);
  await page.waitForSelector('#gpu-in-trace', { timeout: 30_000 });
  await page.waitForFunction(() => {
    const img = document.querySelector('.gpu-chart');
    return img && img.complete && img.naturalWidth > 0;
  }, null, { timeout: 30_000 });
  let purple = 0;
  for (let i = 0; i < 50 && purple < 50; i++) {
    purple = await purplePixels(page);
    if (purple < 50) await page.waitForTimeout(100);
  }
  assert.ok(purple >= 50, `NVML line not drawn: ${purple} purple pixels`);
  await page.screenshot({ path: join(out, 'nvml.png'), fullPage: true });
  await ctx.close();
});

/** Pixels of the timeline plot within 4 of an RGB colour. */
async function pixelsNear(page, [r0, g0, b0]) {
  return page.evaluate(([r0, g0, b0]) => {
    const c = document.querySelector('#timeline');
    const { data } = c.getContext('2d').getImageData(72, 26, c.width - 84, c.height - 52);
    let n = 0;
    for (let i = 0; i < data.length; i += 4) {
      if (Math.abs(data[i] - r0) <= 4 && Math.abs(data[i + 1] - g0) <= 4 && Math.abs(data[i + 2] - b0) <= 4) n++;
    }
    return n;
  }, [r0, g0, b0]);
}

test('memory outside PyTorch is shaded over time: CuPy holding 3 GiB beside the allocator', async () => {
  const { url } = await uploadFilesViaApi(['cupy_outside.pickle.gz', 'cupy_outside.nvidia_smi.csv']);
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page = await ctx.newPage();
  await page.goto(`${base}${url}`);
  await waitForTimeline(page);
  await page.waitForSelector('#non-pytorch', { timeout: 30_000 });
  // The shading: the NVML purple at 16 % over white, between reserved and `used`.
  let shaded = 0;
  for (let i = 0; i < 50 && shaded < 2000; i++) {
    shaded = await pixelsNear(page, [233, 227, 234]);
    if (shaded < 2000) await page.waitForTimeout(100);
  }
  assert.ok(shaded >= 2000, `outside-PyTorch memory not shaded: ${shaded} pixels`);
  await page.screenshot({ path: join(out, 'outside_pytorch.png'), fullPage: true });
  await ctx.close();
});

test('named MemPools are listed by name and drawn as their own envelopes', async () => {
  const { url } = await uploadFilesViaApi(['named_pools.pickle.gz']);
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page = await ctx.newPage();
  await page.goto(`${base}${url}`);
  await waitForTimeline(page);
  await page.waitForSelector('#pools', { timeout: 30_000 });
  const pools = await page.textContent('#pools');
  assert.match(pools, /MemPool “kv_cache” \(0, 1\): reserved at most 512\.0 MiB/);
  assert.match(pools, /MemPool “scratch” \(0, 2\)/);
  await page.screenshot({ path: join(out, 'named_pools.png'), fullPage: true });
  // The first private pool's envelope is teal (0,128,128), antialiased.
  const teal = await page.evaluate(() => {
    const c = document.querySelector('#timeline');
    const { data } = c.getContext('2d').getImageData(72, 26, c.width - 84, c.height - 52);
    let n = 0;
    for (let i = 0; i < data.length; i += 4) {
      const [r, g, b] = [data[i], data[i + 1], data[i + 2]];
      if (r + 60 < g && Math.abs(g - b) < 20) n++;
    }
    return n;
  });
  assert.ok(teal >= 100, `kv_cache envelope not drawn: ${teal} teal pixels`);
  await ctx.close();
});

test('a report of NVML logs alone shows each GPU and process', async () => {
  const { url } = await uploadFilesViaApi(['nvidia_smi_dmon.txt', 'nvidia_smi_apps.csv']);
  const ctx = await browser.newContext();
  const page = await ctx.newPage();
  await page.goto(`${base}${url}`);
  await page.waitForSelector('.gpu-log .gpu-peak', { timeout: 30_000 });
  // awk over the dmon log: max fb = 9781 MB.
  assert.equal(await page.textContent('.gpu-log .gpu-peak .v'), '9.55 GiB');
  // The per-process log: pid 421 peaked at 9772 MiB (dmon has no bus ids to name its GPU by).
  assert.match(await page.textContent('.processes'), /pid 421 \(python3\) on bus 00000000:00:06\.0: peak 9\.54 GiB/);
  await page.waitForFunction(() => {
    const img = document.querySelector('.gpu-chart');
    return img && img.complete && img.naturalWidth > 0;
  }, null, { timeout: 30_000 });
  await ctx.close();
});

test('an Nsight Systems export is charted like a snapshot, its leak found', async () => {
  const { url } = await uploadFilesViaApi(['cuda_alloc.sqlite']);
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page = await ctx.newPage();
  await page.goto(`${base}${url}`);
  await waitForTimeline(page);
  // Python's sqlite3 replay of CUDA_GPU_MEMORY_USAGE_EVENTS: peak 1,975,517,184 B.
  assert.equal(await page.textContent('#peak-value'), '1.84 GiB');
  assert.match(await page.textContent('.source-note'), /driver allocations/);
  assert.match(await page.textContent('#leaks'), /16\.0 MiB \[size\]/);
  const painted = await drawnFraction(page);
  assert.ok(painted > 0.05, `timeline mostly blank: ${painted}`);
  await page.screenshot({ path: join(out, 'nsys.png'), fullPage: true });
  await ctx.close();
});

test('what the peak is made of, and what if the batch doubled with checkpointing', async () => {
  // GPT (167,356,416 parameters, AdamW) at batch 8, captured on the H200.
  const { url } = await uploadFilesViaApi(['gpt_b8.pickle.gz']);
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page = await ctx.newPage();
  await page.goto(`${base}${url}`);
  await waitForTimeline(page);
  // Parameters 669,425,664 B and AdamW's two states 1,338,851,328 B, live at the peak.
  assert.match(await page.textContent('#budget'), /parameter — 638\.4 MiB at the peak/);
  assert.match(await page.textContent('#budget'), /optimizer_state — 1\.25 GiB at the peak/);
  // Memory by category over the timeline's window: stacked areas drawn.
  await page.waitForFunction(() => {
    const c = document.querySelector('#category-chart');
    if (!c || c.width < 100) return false;
    const { data } = c.getContext('2d').getImageData(80, 10, c.width - 100, 120);
    let painted = 0;
    for (let i = 0; i < data.length; i += 4) if (data[i] < 245 || data[i + 1] < 245 || data[i + 2] < 245) painted++;
    return painted / (data.length / 4) > 0.05;
  }, null, { timeout: 30_000 });
  await page.fill('#whatif-run-batch', '8');
  await page.fill('#whatif-batch', '16');
  await page.check('#whatif-ckpt');
  await page.click('#whatif-predict');
  await page.waitForSelector('#whatif-result', { timeout: 30_000 });
  // The same prediction as `memlens whatif --batch-size 8 --set batch_size=16 --set
  // activation_checkpointing=true` (8,406,992,642 B; the real checkpointed run at 16 peaked at
  // 8,023,834,636 B).
  assert.match(await page.textContent('#whatif-result'), /peak 6\.93 GiB → predicted 7\.83 GiB/);
  assert.match(await page.textContent('#whatif-result'), /about 8 layers/);
  await page.screenshot({ path: join(out, 'whatif.png'), fullPage: true });
  await ctx.close();
});

/** PyTorch's own `requested_bytes.all.peak` of a trace. */
function oraclePeak(stats) {
  return JSON.parse(readFileSync(join(traces, stats), 'utf8'))['requested_bytes.all.peak'];
}

async function waitReady(id) {
  for (let i = 0; i < 600; i++) {
    const s = await (await fetch(`${base}/api/reports/${id}/status`)).json();
    if (s.state === 'ready') return;
    assert.notEqual(s.state, 'failed', s.error);
    await new Promise(r => setTimeout(r, 200));
  }
  assert.fail(`report ${id} not ready`);
}

/** Fraction of a canvas's pixels in one colour, antialiasing allowed. */
async function colourFraction(page, selector, [r0, g0, b0]) {
  return page.evaluate(({ selector, r0, g0, b0 }) => {
    const c = document.querySelector(selector);
    const { data } = c.getContext('2d').getImageData(0, 0, c.width, c.height);
    let n = 0;
    for (let i = 0; i < data.length; i += 4) {
      if (Math.abs(data[i] - r0) < 40 && Math.abs(data[i + 1] - g0) < 40 && Math.abs(data[i + 2] - b0) < 40) n++;
    }
    return n / (data.length / 4);
  }, { selector, r0, g0, b0 });
}

test('two runs compared from the report page: the peak difference to the byte, mostly activations', async () => {
  // The shared pair: GPT without and with activation checkpointing.
  const a = await uploadFilesViaApi(['gpt_train.pickle']);
  const b = await uploadFilesViaApi(['gpt_train_ckpt.pickle']);
  await waitReady(a.id);
  await waitReady(b.id);
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page = await ctx.newPage();
  await page.goto(`${base}${a.url}`);
  await waitForTimeline(page);
  // Paste the other report's share link and compare.
  await page.fill('#compare-with', `${base}${b.url}`);
  await page.click('#compare-go');
  await page.waitForURL(`**/compare/${a.id}**/${b.id}`, { timeout: 30_000 });
  await page.waitForSelector('#peak-delta', { timeout: 60_000 });
  const want = oraclePeak('gpt_train.memory_stats.json') - oraclePeak('gpt_train_ckpt.memory_stats.json');
  assert.equal(Number(await page.getAttribute('#peak-delta', 'data-bytes')), want);
  assert.match(await page.textContent('#compare-headline'), /allocated peak [^;]*: activation −/);
  // The activation row carries nearly all of it.
  const act = await page.textContent('#compare-categories tr[data-category="activation"]');
  assert.match(act, /\+2\.19 GiB/);
  assert.match(await page.textContent('#compare-stacks'), /train\.py/);
  assert.match(await page.textContent('#compare-iterations'), /iteration 4/);
  // Both lines are drawn on the aligned axis, with the gap shaded in A's (lighter) colour.
  await page.waitForSelector('#compare-chart[data-drawn]');
  await page.screenshot({ path: join(out, 'compare.png'), fullPage: true });
  assert.ok(await colourFraction(page, '#compare-chart', [192, 86, 43]) > 0.001, 'A line drawn');
  assert.ok(await colourFraction(page, '#compare-chart', [52, 101, 164]) > 0.001, 'B line drawn');
  assert.ok(await colourFraction(page, '#compare-chart', [242, 215, 206]) > 0.01, 'the gap shaded');
  // The link is the share link: a fresh context shows the same comparison.
  const ctx2 = await browser.newContext();
  const page2 = await ctx2.newPage();
  await page2.goto(page.url());
  await page2.waitForSelector('#peak-delta', { timeout: 60_000 });
  assert.equal(Number(await page2.getAttribute('#peak-delta', 'data-bytes')), want);
  await ctx2.close();
  await ctx.close();
});

test('a run of four DDP ranks in one upload: overview, worst rank, each rank, two ranks compared', async () => {
  // Four real gloo DDP ranks on the H200, rank 3 fed sequences twice as long; uploaded out of
  // order, numbered from the file names.
  const names = ['ddp_rank2.pickle.gz', 'ddp_rank0.pickle.gz', 'ddp_rank3.pickle.gz', 'ddp_rank1.pickle.gz'];
  const { id, url } = await uploadFilesViaApi(names);
  await waitReady(id);
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page = await ctx.newPage();
  await page.goto(`${base}${url}`);
  await page.waitForSelector('#run-overview', { timeout: 60_000 });
  assert.equal(await page.locator('#run-overview a.rank').count(), 4);
  assert.match(await page.textContent('#run-verdict'), /Worst: rank 3 .* above the median .*Imbalanced/);
  // The report opens on the worst rank, whose peak is its own process's counter.
  assert.match(await page.textContent('#report-title'), /^rank 3 · ddp_rank3\.pickle\.gz$/);
  await page.waitForSelector('#peak-value');
  const peaks = [0, 1, 2, 3].map(r => oraclePeak(`ddp_rank${r}.memory_stats.json`));
  const label = b => (b / 2 ** 30).toFixed(2) + ' GiB';
  assert.equal(await page.textContent('#peak-value'), label(peaks[3]));
  await waitForTimeline(page);
  await page.screenshot({ path: join(out, 'run_overview.png'), fullPage: true });
  // Each rank opens its own view.
  await page.click('#run-overview a.rank[data-rank="0"]');
  await page.waitForURL(/file=1/, { timeout: 30_000 });
  await page.waitForSelector('#peak-value', { timeout: 60_000 });
  assert.match(await page.textContent('#report-title'), /^rank 0 /);
  assert.equal(await page.textContent('#peak-value'), label(peaks[0]));
  await waitForTimeline(page);
  // Any two ranks open the compare view (worst against a typical one by default).
  await page.click('#rank-compare-go');
  await page.waitForURL(`**/compare/${id}:2/${id}:*`, { timeout: 30_000 });
  await page.waitForSelector('#peak-delta', { timeout: 60_000 });
  assert.equal(Number(await page.getAttribute('#peak-delta', 'data-bytes')), peaks[3] - peaks[0]);
  assert.match(await page.textContent('#side-a'), /rank 3/);
  assert.match(await page.textContent('#compare-headline'), /activation/);
  await page.screenshot({ path: join(out, 'compare_ranks.png'), fullPage: true });
  await ctx.close();
});

test('four GPUs whose only OOM is on cuda:1: the report opens there, says so, and lists every device', async () => {
  const { id, url } = await uploadFilesViaApi(['four_gpus.pickle.gz']);
  await waitReady(id);
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page = await ctx.newPage();
  await page.goto(`${base}${url}`);
  await page.waitForSelector('#devices', { timeout: 60_000 });
  assert.match(await page.textContent('#focus-note'), /Opened on cuda:1: the only device with an OOM/);
  assert.equal(await page.inputValue('#device-select'), '1');
  assert.equal(await page.locator('#devices tr.device-row').count(), 4);
  const oomPeak = oraclePeak('gpt_b16_oom.memory_stats.json');
  assert.equal(await page.textContent('#peak-value'), (oomPeak / 2 ** 30).toFixed(2) + ' GiB');
  await waitForTimeline(page);
  await page.screenshot({ path: join(out, 'four_gpus.png'), fullPage: true });
  await page.locator('#devices').screenshot({ path: join(out, 'devices.png') });
  // A row opens its device.
  await page.click('#devices tr.device-row[data-device="2"]');
  await page.waitForFunction(() => document.querySelector('#peak-value')?.textContent === '1.28 GiB', null, { timeout: 30_000 });
  await ctx.close();
});

test('C++ stacks read as model code: a Hugging Face Llama, its stacks, search and flame graph', async () => {
  const { id, url } = await uploadFilesViaApi(['hf_llama_cpp.pickle.gz']);
  await waitReady(id);
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page = await ctx.newPage();
  await page.goto(`${base}${url}`);
  await waitForTimeline(page);
  // By model code: transformers' own files lead the list.
  await page.waitForSelector('#peak-modules');
  const first = await page.textContent('#peak-modules li:first-child .headline');
  assert.match(first, /^transformers\//);
  // By stack: no entry starts with the allocator, the interpreter or the dispatcher.
  await page.check('#peak-by-stack');
  await page.waitForSelector('#peak-stacks');
  const heads = await page.locator('#peak-stacks .headline').allTextContents();
  assert.ok(heads.length >= 5);
  for (const h of heads) assert.doesNotMatch(h, /CachingAllocator|^c10::|^at::_ops|^Py|_call_impl/, h);
  assert.ok(heads.some(h => /modeling_llama\.py:\d+ forward/.test(h)), heads.join('\n'));
  // The full stack is one click away, the folded frames greyed.
  await page.click('#peak-stacks li:first-child button.link');
  await page.click('#peak-stacks li:first-child button.link >> text=full stack');
  await page.waitForSelector('#peak-stacks li:first-child ol.stack.full li.internal');
  assert.match(await page.textContent('#peak-stacks li:first-child ol.stack.full'), /CUDACachingAllocator/);
  // Search by frame text, then by address: matches turn magenta on the timeline.
  await page.fill('#search', 'sdpa_attention');
  await page.click('#search-go');
  await page.waitForFunction(() => /allocation\(s\) match/.test(document.querySelector('#search-result')?.textContent || ''), null, { timeout: 30_000 });
  const magenta = () => colourFraction(page, '#timeline', [200, 0, 160]);
  assert.ok(await magenta() > 0.0005, 'matches drawn');
  const hit = await (await fetch(`${base}/api/reports/${id}/allocations?stack=sdpa_attention&limit=1`)).json();
  const addr = '0x' + hit.allocations[0].addr.toString(16);
  await page.fill('#search', addr);
  await page.click('#search-go');
  await page.waitForFunction(a => (document.querySelector('#search-result')?.textContent || '').includes(a), addr, { timeout: 30_000 });
  assert.match(await page.textContent('#search-result'), /\d+ allocation\(s\) match/);
  // The flame graph of the window: drawn, and hovering names a frame with its share.
  await page.waitForSelector('#flame-chart[data-nodes]', { timeout: 30_000 });
  assert.ok(Number(await page.getAttribute('#flame-chart', 'data-nodes')) > 10);
  const fb = await page.locator('#flame-chart').boundingBox();
  await page.mouse.move(fb.x + fb.width * 0.3, fb.y + 27);
  await page.waitForFunction(() => /%/.test(document.querySelector('#flame-hover')?.textContent || ''), null, { timeout: 10_000 });
  await page.screenshot({ path: join(out, 'hf_llama_cpp.png'), fullPage: true });
  await page.locator('#flame').screenshot({ path: join(out, 'flame.png') });
  await page.locator('.canvas-wrap').screenshot({ path: join(out, 'search.png') });
  await page.locator('#findings').screenshot({ path: join(out, 'findings.png') });
  await ctx.close();
});

test('an allocation without a stack says why: the autograd thread of a Python-only recording', async () => {
  const { id, url } = await uploadFilesViaApi(['hf_llama.pickle.gz']);
  await waitReady(id);
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page = await ctx.newPage();
  await page.goto(`${base}${url}`);
  await waitForTimeline(page);
  await page.check('#peak-by-stack');
  const empty = await page.locator('#peak-stacks li.no-stack .headline').allTextContents();
  assert.ok(empty.length >= 1);
  for (const e of empty) assert.match(e, /^no stack — /, e);
  assert.ok(empty.some(e => /autograd thread during backward/.test(e)), empty.join('\n'));
  await ctx.close();
});

test('a ready report asks for its first timeline together with the summary, and a wrong width guess is redrawn exactly', async () => {
  const { url } = await uploadViaApi('gpt_train.pickle', readFileSync(join(traces, 'gpt_train.pickle')));
  const id = url.split('/').pop();
  for (;;) {
    const s = await (await fetch(`${base}/api/reports/${id}/status`)).json();
    if (s.state === 'ready') break;
    assert.notEqual(s.state, 'failed', s.error);
    await new Promise(res => setTimeout(res, 200));
  }
  const timelineRequests = page => page.evaluate(() => performance.getEntriesByType('resource')
    .filter(e => e.name.includes('/timeline?'))
    .map(e => ({ url: e.name, start: e.startTime })));
  const ctx = await browser.newContext({ viewport: { width: 1200, height: 900 } });
  // The first open guesses the canvas width from the window, and remembers what it measured.
  let page = await ctx.newPage();
  await page.goto(`${base}${url}`);
  await waitForTimeline(page);
  // The page's loader (index.html) sent the first requests before the app had loaded, by the
  // URLs the app builds: the app took them, so each went out once. (Sent before the wasm
  // arrived is what says the timeline did not wait for the summary: comparing its start with
  // the summary's end raced on a loaded machine, where a small report's summary can be
  // answered while the loader's script is descheduled between its two fetches.)
  const early = await page.evaluate(() => {
    const all = performance.getEntriesByType('resource');
    const one = test => all.find(e => test(new URL(e.name).pathname + new URL(e.name).search));
    const count = e => all.filter(x => x.name === e.name).length;
    const wasm = one(p => p.endsWith('_bg.wasm'));
    const reqs = [one(p => p.endsWith('/status')), one(p => /\/api\/reports\/[0-9a-f]+$/.test(p)), one(p => p.includes('/timeline?'))];
    return { wasmEnd: wasm.responseEnd, starts: reqs.map(r => r.startTime), counts: reqs.map(count), urls: reqs.map(r => r.name) };
  });
  assert.deepEqual(early.counts, [1, 1, 1], `status, summary, timeline: ${JSON.stringify(early)}`);
  assert.ok(early.starts.every(t => t < early.wasmEnd), `sent before the app had loaded: ${JSON.stringify(early)}`);
  const measured = await page.evaluate(() => Number(document.querySelector('#timeline').width) - 84);
  await page.close();

  // A remembered width that is wrong (the window was resized, say): the guess is drawn, then
  // the exact width is asked for and drawn.
  page = await ctx.newPage();
  await page.goto(`${base}/`);
  await page.evaluate(() => {
    for (const k of Object.keys(localStorage)) {
      if (k.startsWith('memlens.timeline-width.')) localStorage.setItem(k, '700');
    }
  });
  await page.goto(`${base}${url}`);
  await page.waitForFunction(w => performance.getEntriesByType('resource')
    .some(e => e.name.includes(`/timeline?`) && e.name.includes(`width=${w}&`)), measured, { timeout: 20_000 });
  await waitForTimeline(page);
  const widths = (await timelineRequests(page)).map(r => Number(new URL(r.url).searchParams.get('width')));
  assert.equal(widths[0], 700 - 84, `the guess is what was remembered: ${widths}`);
  assert.equal(widths.filter(w => w === 700 - 84).length, 1, `the loader's guess is the app's: ${widths}`);
  assert.ok(widths.includes(measured), `then the measured width ${measured}: ${widths}`);
  await page.waitForFunction(w => {
    const c = document.querySelector('#timeline');
    return c && c.dataset.drawnAt && location.search.includes('start=');
  }, measured, { timeout: 20_000 });
  await page.close();
  await ctx.close();
});

test('a job of three runs: the verdict first, the regression flagged, limits edited by its owner', async () => {
  const upload = async (name) => {
    const form = new FormData();
    form.append('file', new Blob([readFileSync(join(traces, name))]), name);
    const r = await fetch(`${base}/api/reports?job=e2e-nightly&title=${name}`, { method: 'POST', body: form });
    assert.equal(r.status, 201);
    const created = await r.json();
    await waitReady(created.id);
    return created;
  };
  // b8, then b16 (the peak grows 68.5 %: past the default 5 %), then b8 again.
  const first = await upload('gpt_b8.pickle.gz');
  const second = await upload('gpt_b16.pickle.gz');
  const third = await upload('gpt_b8.pickle.gz');
  assert.equal(second.job_url, first.job_url);
  assert.equal(third.job_url, first.job_url);
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page = await ctx.newPage();
  await page.goto(`${base}${first.job_url}`);
  await page.waitForSelector('#job-chart[data-drawn]', { timeout: 30_000 });
  assert.equal(await page.textContent('#job-name'), 'Job e2e-nightly');
  assert.ok(await inFirstScreen(page, '#job-verdict'), 'the verdict leads the page');
  assert.match(await page.textContent('#job-verdict'), /last run within limits: allocated peak −4\.74 GiB .* 3 runs · 1 run broke the job's limits/);
  const rows = await page.$$eval('#job-runs tbody tr', trs => trs.map(t => ({ id: t.dataset.run, regression: t.classList.contains('regression') })));
  assert.deepEqual(rows, [
    { id: first.id, regression: false },
    { id: second.id, regression: true },
    { id: third.id, regression: false },
  ]);
  assert.match(await page.textContent(`#job-runs tr[data-run="${second.id}"]`), /regression: allocated peak \+4\.74 GiB \(\+68\.5 %\), limit 5%/);
  assert.ok(await colourFraction(page, '#job-chart', [214, 39, 40]) > 0.0005, 'the regression marked in red');
  assert.ok(await colourFraction(page, '#job-chart', [221, 132, 82]) > 0.005, 'activations stacked');
  await page.screenshot({ path: join(out, 'job.png'), fullPage: true });

  // A run compared with the one before it.
  await page.click(`#job-runs tr[data-run="${second.id}"] .job-compare-previous`);
  await page.waitForURL(`**/compare/${first.id}/${second.id}`, { timeout: 30_000 });
  await page.waitForSelector('#compare-headline', { timeout: 30_000 });
  assert.match(await page.textContent('#compare-headline'), /allocated peak/);

  // Only the owner loosens the limits; then no run broke them.
  await page.goto(`${base}${first.job_url}`);
  await page.waitForSelector('#job-chart[data-drawn]', { timeout: 30_000 });
  await page.click('#job-limits summary');
  await page.fill('#job-max-peak', '100');
  await page.fill('#job-owner-token', 'not-the-token');
  await page.click('#job-limits-save');
  await page.waitForSelector('#job-limits-error', { timeout: 10_000 });
  assert.match(await page.textContent('#job-limits-error'), /owner token/);
  await page.fill('#job-owner-token', first.job_owner_token);
  await page.click('#job-limits-save');
  await page.waitForFunction(() => document.querySelector('#job-verdict')?.textContent.includes('no run broke'), null, { timeout: 10_000 });
  assert.match(await page.textContent('#job-limits-now'), /allocated peak 100%/);
  assert.equal(await page.$$eval('#job-runs tr.regression', trs => trs.length), 0);
  await ctx.close();
});

test('a recording window by window: the page says it grows and refreshes when the next window is in', async () => {
  const windowBytes = k => readFileSync(join(traces, 'windows', `gpt_b8.window_${k}.pickle.gz`));
  const send = async (url, k, headers = {}) => {
    const form = new FormData();
    form.append('file', new Blob([windowBytes(k)]), 'snapshot.pickle');
    const r = await fetch(url, { method: 'POST', body: form, headers });
    assert.ok(r.ok, `${r.status}`);
    return r.json();
  };
  const created = await send(`${base}/api/reports?window=0`, 0);
  await waitReady(created.id);
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page = await ctx.newPage();
  await page.goto(`${base}${created.url}`);
  await page.waitForSelector('#report-growing[data-windows="1"]', { timeout: 30_000 });
  assert.match(await page.textContent('#report-growing'), /1 window so far/);
  for (const k of [1, 2, 3]) {
    await send(`${base}/api/reports/${created.id}/windows?window=${k}`, k, { 'X-Delete-Token': created.delete_token });
  }
  await page.waitForSelector('#report-growing[data-windows="4"]', { timeout: 60_000 });
  await waitForTimeline(page);
  // The whole run now: PyTorch's own peak (6.93 GiB).
  await page.waitForSelector('#peak-value', { timeout: 30_000 });
  assert.equal(await page.textContent('#peak-value'), `${(oraclePeak('gpt_b8.memory_stats.json') / 2 ** 30).toFixed(2)} GiB`);
  await ctx.close();
});

test('plan before you run: a config dropped in, sliders moved, the plan shared by its URL and calibrated from a report', async () => {
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const page = await ctx.newPage();
  await page.goto(`${base}/plan`);
  await page.waitForSelector('#plan-waiting');
  // The small Llama trained on the H100 (traces/plan/configs/llama_train.json), batch 4 × 1024.
  await page.setInputFiles('#plan-config-file', join(traces, 'plan/configs/llama_train.json'));
  await page.fill('#plan-batch', '4');
  await page.fill('#plan-seq', '1024');
  await page.selectOption('#plan-gpu', '24');
  // `memlens plan --model llama_train.json --batch-size 4 --seq-len 1024`: 5,577,158,656 B
  // (the real run peaked at 5,577,896,328 B).
  await page.waitForFunction(() => /Fits in 24\.00 GiB: peak 5\.19 GiB allocated/.test(document.querySelector('#plan-verdict')?.textContent || ''), null, { timeout: 30_000 });
  assert.match(await page.textContent('#plan-model'), /Llama · 155730944 parameters/);
  assert.match(await page.textContent('#plan-largest'), /largest batch at 1024 tokens: \d+/);
  assert.ok(await page.$('#plan-bar [data-category="activation"]'));
  // The batch slider to 64: past 24 GiB.
  await page.evaluate(() => {
    const s = document.querySelector('#plan-batch-slider');
    s.value = '64';
    s.dispatchEvent(new Event('input', { bubbles: true }));
  });
  await page.waitForFunction(() => /Does not fit in 24\.00 GiB/.test(document.querySelector('#plan-verdict')?.textContent || ''), null, { timeout: 30_000 });
  // The URL holds every setting: opened elsewhere, the same plan.
  const shared = page.url();
  assert.match(shared, /batch_size=64/);
  assert.match(shared, /config=/);
  const other = await ctx.newPage();
  await other.goto(shared);
  await other.waitForSelector('#plan-verdict');
  assert.equal(await other.textContent('#plan-verdict'), await page.textContent('#plan-verdict'));
  await page.screenshot({ path: join(out, 'plan.png'), fullPage: true });
  // What would make it fit: single changes, those that fit first; the largest batch is one.
  assert.match(await page.textContent('#plan-alternatives'), /Fits with batch \d+/);
  await page.click('#plan-alternatives li.fits >> text=/Fits with batch/');
  await page.waitForFunction(() => /^Fits in 24\.00 GiB/.test(document.querySelector('#plan-verdict')?.textContent || ''), null, { timeout: 30_000 });
  assert.doesNotMatch(page.url(), /batch_size=64/);
  // From a report: the what-if panel links to a plan calibrated by the run.
  const { id, url } = await uploadFilesViaApi(['plan/runs/llama_b2.pickle.gz']);
  await waitReady(id);
  await other.goto(`${base}${url}`);
  await waitForTimeline(other);
  await other.fill('#whatif-run-batch', '2');
  const href = await other.getAttribute('#whatif-plan-link', 'href');
  assert.match(href, new RegExp(`calibrate=${id}`));
  await other.click('#whatif-plan-link');
  await other.waitForSelector('#plan-calibration');
  await other.fill('#plan-run-seq', '1024');
  await other.fill('#plan-seq', '1024');
  // Calibrated by its own run at its own batch: the run's peak, 3,880,096,136 B.
  await other.waitForFunction(() => /peak 3\.61 GiB allocated/.test(document.querySelector('#plan-verdict')?.textContent || ''), null, { timeout: 30_000 });
  assert.match(await other.textContent('#plan-model'), /calibrated by \/r\//);
  await ctx.close();
});

test('the Serving tab plans a vLLM startup: the KV cache left, whether max_model_len fits, and the remedies', async () => {
  const ctx = await browser.newContext();
  const page = await ctx.newPage();
  await page.goto(`${base}/plan`);
  await page.click('#plan-tab-serving');
  await page.waitForSelector('#plan-serve-form');
  // The RTX 3090 log of vLLM 0.6.4 (traces/serving-logs/vllm-0.6.4-llama-3.1-8b-3090-max-seq-len.log):
  // `memlens plan --serve --model meta-llama/Llama-3.1-8B --gpu-memory 23.58GiB
  // --gpu-memory-utilization 0.9 --max-model-len 29000 --engine-version 0.6.4`: 25,120 tokens.
  await page.fill('#plan-model-preset', 'meta-llama/Llama-3.1-8B');
  await page.dispatchEvent('#plan-model-preset', 'change');
  await page.fill('#plan-serve-gpu', '23.58');
  await page.dispatchEvent('#plan-serve-gpu', 'change');
  await page.fill('#plan-utilization', '0.9');
  await page.dispatchEvent('#plan-utilization', 'change');
  await page.fill('#plan-max-model-len', '29000');
  await page.dispatchEvent('#plan-max-model-len', 'change');
  await page.fill('#plan-engine-version', '0.6.4');
  await page.dispatchEvent('#plan-engine-version', 'change');
  await page.waitForFunction(() => /^Does not fit max_model_len 29000: vLLM would not start/.test(document.querySelector('#plan-serve-verdict')?.textContent || ''), null, { timeout: 30_000 });
  assert.match(await page.textContent('#plan-serve-largest'), /longest max_model_len that fits: 25120 tokens/);
  assert.match(await page.textContent('#plan-serve-remedies'), /--kv-cache-dtype fp8/);
  assert.ok(await page.$('#plan-serve-bar [data-term="KV cache"]'));
  // The URL holds the serving settings: an fp8 KV cache holds the request.
  assert.match(page.url(), /serve=true/);
  await page.selectOption('#plan-kv-dtype', 'fp8');
  await page.waitForFunction(() => /^Fits max_model_len 29000/.test(document.querySelector('#plan-serve-verdict')?.textContent || ''), null, { timeout: 30_000 });
  await page.screenshot({ path: join(out, 'plan-serving.png'), fullPage: true });
  await ctx.close();
});
