// The browser SDK's figures for BENCHMARKS.md (run by `scripts/bench sdk`,
// against the release binary, which serves the SDK itself: no proxy).
//  - Bytes on the wire, in real Firefox (Debian's firefox-esr): every answer
//    from the collector's origin (the SDK's files whatever their number, its
//    config, its bait, its events' answers) as WebDriver BiDi reports it
//    (`bytesReceived`: headers and coded body), for a visitor without a
//    blocker and one with uBlock Origin (the real blocker: the wall is shown),
//    on a first visit (empty cache) and a returning one (same profile, the
//    site's next page, 10 s later). Firefox asks for brotli only over https;
//    the "https" lines give plain http the https Accept-Encoding, as a visitor
//    of a collector behind https sends it.
//  - The embedded files' sizes: raw, gzip -9 and brotli 11 (what the binary
//    holds), for reference; every visitor's files apart from the wall module,
//    which only visitors shown a wall download (the wire lines count it then).
//  - In headless Chromium (CDP) with the CPU throttled 4x: the main-thread
//    time (CDP `TaskDuration`) and the delay of the `load` event the SDK adds
//    to the same page without it, and the time from `Postern.init()` to the
//    verdict; medians over BENCH_SDK_LOADS page loads, each a new visitor.
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const zlib = require('node:zlib');
const h = require('../tests/browser/harness');
const ff = require('../tests/browser/firefox');

const LOADS = Number(process.env.BENCH_SDK_LOADS || 20);
const CPU_SLOWDOWN = 4;
// DESIGN §4 as the issue sets it: bytes a visitor downloads (1 KB = 1000 B).
const CLEAN = { target: 12000, goal: 8000 };
const BLOCKED = { target: 20000, goal: 14000 };
const HTTPS_ACCEPT_ENCODING = 'gzip, deflate, br, zstd';

const median = (xs) => xs.slice().sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];

function sizes() {
  const dist = path.join(h.ROOT, 'sdk-wasm/dist');
  const files = fs.readdirSync(dist).sort((a, b) => (a === 'v1.js' ? -1 : b === 'v1.js' ? 1 : a.localeCompare(b)));
  const total = { raw: 0, gzip: 0, br: 0 };
  // The wall module is downloaded only by visitors who are shown a wall.
  const common = { raw: 0, gzip: 0, br: 0 };
  for (const f of files) {
    const b = fs.readFileSync(path.join(dist, f));
    const s = {
      raw: b.length,
      gzip: zlib.gzipSync(b, { level: 9 }).length,
      br: zlib.brotliCompressSync(b, { params: { [zlib.constants.BROTLI_PARAM_QUALITY]: 11 } }).length,
    };
    for (const k of Object.keys(total)) {
      total[k] += s[k];
      if (!f.startsWith('wall-')) common[k] += s[k];
    }
    console.log(`sdk file ${f.padEnd(28)} raw=${s.raw} gzip=${s.gzip} br=${s.br}`);
  }
  console.log(`sdk file every visitor's (no wall) raw=${common.raw} gzip=${common.gzip} br=${common.br}`);
  console.log(`sdk file total ${String(files.length).padEnd(22)} raw=${total.raw} gzip=${total.gzip} br=${total.br}`);
}

/** One visitor's two visits in Firefox: the bytes of every answer from the collector. */
async function visits(browser, collector, firstUrl, nextUrl, blocked) {
  const seen = [];
  const listener = (p) => { if (p.request.url.startsWith(collector)) seen.push(p); };
  // WebDriver BiDi's network events: puppeteer subscribes to them and hands them on.
  browser.connection.on('network.responseCompleted', listener);
  const context = await browser.createBrowserContext();
  try {
    const page = await context.newPage();
    const visit = async (url, wall) => {
      const from = seen.length;
      await page.goto(url);
      const verdict = await page.evaluate(() => window.Postern.check());
      if (verdict.blocked !== blocked) throw new Error(`expected blocked=${blocked}, got ${JSON.stringify(verdict)}`);
      // A soft wall shows once a session: on the returning visit it may not.
      if (wall) await page.waitForFunction(() => !!document.querySelector('[data-postern-wall]'), { timeout: 10000 });
      // Whatever the SDK fetches after its verdict (its events, the wall) has
      // arrived once the collector has been quiet for a second.
      for (let n = -1; n !== seen.length; ) {
        n = seen.length;
        await new Promise((r) => setTimeout(r, 1000));
      }
      return seen.slice(from).map((p) => ({
        path: new URL(p.request.url).pathname,
        method: p.request.method,
        status: p.response.status,
        bytes: p.response.bytesReceived,
        cached: p.response.fromCache,
        coding: (p.response.headers.find((x) => x.name.toLowerCase() === 'content-encoding') || { value: { value: '-' } }).value.value,
      }));
    };
    const first = await visit(firstUrl, blocked);
    await new Promise((r) => setTimeout(r, 10000));
    const returning = await visit(nextUrl, false);
    return { first, returning };
  } finally {
    await context.close();
    browser.connection.off('network.responseCompleted', listener);
  }
}

function wireLine(label, responses, budget) {
  const total = responses.reduce((s, r) => s + r.bytes, 0);
  const verdict = total <= budget.goal ? 'within goal' : total <= budget.target ? 'within target, over goal' : 'OVER TARGET';
  console.log(`sdk wire firefox ${label.padEnd(34)} bytes=${String(total).padEnd(6)} requests=${responses.length}   target<=${budget.target} goal<=${budget.goal}: ${verdict}`);
  for (const r of responses) {
    console.log(`    ${r.method} ${r.path.padEnd(44)} ${r.status} ${r.cached ? 'cache' : r.coding.padEnd(5)} ${r.bytes} B`);
  }
}

async function wire() {
  const postern = await h.startPostern();
  const pages = {};
  const publisher = await h.startPublisher(pages);
  const collector = ff.named(postern.url, 'postern.test');
  pages['/article'] = h.articlePage(collector, postern.siteId, 'An article');
  pages['/next'] = h.articlePage(collector, postern.siteId, 'The next article');
  const probe = h.BAIT.sets[0].element;
  pages['/probe'] = `<div id="${probe.id}" class="${probe.classes.join(' ')}" style="width:300px;height:250px">&nbsp;</div>`;
  try {
    for (const [scheme, prefs] of [['https', { 'network.http.accept-encoding': HTTPS_ACCEPT_ENCODING }], ['http', {}]]) {
      for (const blocked of [false, true]) {
        const browser = await ff.launchFirefox({ ublock: blocked, prefs });
        try {
          if (blocked) await ff.waitForUblock(browser, `${publisher.origin}/probe`, probe.id);
          const v = await visits(browser, collector, `${publisher.origin}/article`, `${publisher.origin}/next`, blocked);
          const who = blocked ? 'uBlock Origin + wall' : 'no blocker';
          const budget = blocked ? BLOCKED : CLEAN;
          wireLine(`${scheme} ${who}, first visit`, v.first, budget);
          wireLine(`${scheme} ${who}, returning`, v.returning, budget);
        } finally {
          await browser.close();
        }
      }
    }
  } finally {
    await publisher.stop();
    await postern.stop();
  }
}

/** Chromium, CPU throttled: what the SDK adds to a page's main thread and load event. */
async function mainThread() {
  const postern = await h.startPostern();
  const pages = {};
  const publisher = await h.startPublisher(pages);
  const body = `<p>${'Words of an article. '.repeat(200)}</p>`;
  pages['/plain'] = `<!doctype html><html><head><meta charset="utf-8"><title>bench</title></head><body>${body}
<script>window.verdict = Promise.resolve({ v: null, ms: 0 });</script></body></html>`;
  pages['/sdk'] = `<!doctype html><html><head><meta charset="utf-8"><title>bench</title></head><body>${body}
<script src="${postern.url}/p/v1.js"></script>
<script>
  const t0 = performance.now();
  Postern.init({ siteId: '${postern.siteId}' });
  window.verdict = Postern.check().then((v) => ({ v, ms: performance.now() - t0 }));
</script></body></html>`;
  const browser = await h.launchBrowser();
  const load = async (url, block) => {
    const context = await browser.newContext();
    try {
      const page = await context.newPage();
      if (block) {
        await h.blockBaitRequest(page);
        await h.hideBaitElement(page);
      }
      const cdp = await context.newCDPSession(page);
      await cdp.send('Performance.enable');
      await cdp.send('Emulation.setCPUThrottlingRate', { rate: CPU_SLOWDOWN });
      await page.goto(url, { waitUntil: 'load' });
      const r = await page.evaluate(() => window.verdict);
      // The events sent after the verdict and the wall, when there is one.
      await new Promise((res) => setTimeout(res, 1000));
      const { metrics } = await cdp.send('Performance.getMetrics');
      const loadMs = await page.evaluate(() => performance.getEntriesByType('navigation')[0].loadEventStart);
      return { task: metrics.find((m) => m.name === 'TaskDuration').value * 1000, load: loadMs, verdict: r };
    } finally {
      await context.close();
    }
  };
  try {
    const plain = { task: [], load: [] };
    for (let i = 0; i < LOADS; i++) {
      const r = await load(`${publisher.origin}/plain`);
      plain.task.push(r.task);
      plain.load.push(r.load);
    }
    for (const [label, block] of [['no blocker', false], ['blocked (simulated)', true]]) {
      const sdk = { task: [], load: [], ms: [] };
      let verdict;
      for (let i = 0; i < LOADS; i++) {
        const r = await load(`${publisher.origin}/sdk`, block);
        sdk.task.push(r.task);
        sdk.load.push(r.load);
        sdk.ms.push(r.verdict.ms);
        verdict = r.verdict.v;
      }
      const task = median(sdk.task) - median(plain.task);
      const delay = median(sdk.load) - median(plain.load);
      console.log(`sdk main-thread chromium cpu/${CPU_SLOWDOWN} ${label.padEnd(20)} +${task.toFixed(0)} ms (page with SDK ${median(sdk.task).toFixed(0)}, without ${median(plain.task).toFixed(0)}) loads=${LOADS}`);
      console.log(`sdk load-event chromium cpu/${CPU_SLOWDOWN} ${label.padEnd(21)} +${delay.toFixed(0)} ms (load at ${median(sdk.load).toFixed(0)} vs ${median(plain.load).toFixed(0)} ms)`);
      console.log(`sdk init->verdict chromium cpu/${CPU_SLOWDOWN} ${label.padEnd(18)} median_ms=${median(sdk.ms).toFixed(0)} verdict=${JSON.stringify(verdict)}`);
    }
  } finally {
    await browser.close();
    await publisher.stop();
    await postern.stop();
  }
}

(async () => {
  sizes();
  await wire();
  await mainThread();
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
