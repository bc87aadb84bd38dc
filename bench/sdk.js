// The browser SDK's figures for BENCHMARKS.md (run by `scripts/bench sdk`):
//  - bytes, raw and gzip -9, of the loader, the glue and the wasm embedded in the collector;
//  - the time from `Postern.init()` to the verdict of `Postern.check()` in headless Chromium,
//    median and p95 over 20 page loads, each a new visitor (fresh context, so the SDK files
//    come from the HTTP cache only after the first load, as for a returning reader),
//    without a blocker and with the bait request blocked.
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const zlib = require('node:zlib');
const h = require('../tests/browser/harness');

const LOADS = Number(process.env.BENCH_SDK_LOADS || 20);

function sizes() {
  const dist = path.join(h.ROOT, 'sdk-wasm/dist');
  const files = fs.readdirSync(dist).sort((a, b) => (a === 'v1.js' ? -1 : b === 'v1.js' ? 1 : a.localeCompare(b)));
  let raw = 0;
  let gz = 0;
  for (const f of files) {
    const b = fs.readFileSync(path.join(dist, f));
    const g = zlib.gzipSync(b, { level: 9 }).length;
    raw += b.length;
    gz += g;
    console.log(`sdk bytes ${f.padEnd(24)} raw=${b.length} gzip=${g}`);
  }
  console.log(`sdk bytes total (loader+glue+wasm) raw=${raw} gzip=${gz}   budget: loader <= 1536 gzip, total <= 20480 gzip`);
}

const pct = (xs, p) => xs.slice().sort((a, b) => a - b)[Math.min(xs.length - 1, Math.ceil((p / 100) * xs.length) - 1)];

async function verdictTimes() {
  const postern = await h.startPostern();
  const pages = {};
  const publisher = await h.startPublisher(pages);
  pages['/bench'] = `<!doctype html><html><head><meta charset="utf-8"><title>bench</title></head><body>
<p>${'Words of an article. '.repeat(200)}</p>
<script src="${postern.url}/p/v1.js"></script>
<script>
  const t0 = performance.now();
  Postern.init({ siteId: '${postern.siteId}' });
  window.verdict = Postern.check().then((v) => ({ v, ms: performance.now() - t0 }));
</script></body></html>`;
  const browser = await h.launchBrowser();
  try {
    for (const [label, block] of [['no blocker', undefined], ['bait request blocked', h.blockBaitRequest]]) {
      const times = [];
      let verdict;
      for (let i = 0; i < LOADS; i++) {
        const context = await browser.newContext();
        const page = await context.newPage();
        if (block) await block(page);
        await page.goto(`${publisher.origin}/bench`);
        const r = await page.evaluate(() => window.verdict);
        verdict = r.v;
        times.push(r.ms);
        await context.close();
      }
      console.log(`sdk init->verdict ${label.padEnd(22)} median_ms=${pct(times, 50).toFixed(0)} p95_ms=${pct(times, 95).toFixed(0)} loads=${LOADS} verdict=${JSON.stringify(verdict)}`);
    }
  } finally {
    await browser.close();
    await publisher.stop();
    await postern.stop();
  }
}

(async () => {
  sizes();
  await verdictTimes();
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
