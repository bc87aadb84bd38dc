// Shared helpers for Postern's browser tests (node:test + playwright-core
// driving Debian's Chromium). Everything is real and on loopback: the
// `postern` binary on port 0 with a temporary database, a publisher site
// served by a tiny HTTP server, and headless Chromium.
//
//   const h = require('./harness');
//   const postern = await h.startPostern();           // { url, key, api(), stop() }
//   const browser = await h.launchBrowser();
//   const page = await h.openPage(browser, url, t);   // fails the test on console errors
//
// Host names: pages are opened as http://publisher.test:PORT (a non-loopback
// name, mapped to 127.0.0.1 by --host-resolver-rules), so they are a
// different origin from the collector at http://127.0.0.1:PORT.
'use strict';

const { spawn, execFileSync } = require('node:child_process');
const fs = require('node:fs');
const http = require('node:http');
const os = require('node:os');
const path = require('node:path');
const { chromium } = require('playwright-core');

const ROOT = path.resolve(__dirname, '../..');
const BIN = process.env.POSTERN_BIN || path.join(ROOT, 'target/debug/postern');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const ARTIFACTS = path.join(__dirname, 'artifacts');
const BAIT = JSON.parse(fs.readFileSync(path.join(ROOT, 'tests/filter-lists/bait.json'), 'utf8'));
const PUBLISHER_HOST = 'publisher.test';

/** Starts the real collector on port 0 with a fresh database, an account,
 *  an admin API key and (unless `site: false`) a site on publisher.test. */
async function startPostern({ demo = false, site = true, args = [] } = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'postern-browser-'));
  const db = path.join(dir, 'postern.db');
  const cli = (...a) => execFileSync(BIN, ['admin', ...a, '--db', db], { encoding: 'utf8' }).trim();
  const key = cli('create-key', '--account', 'browser-tests');
  let child;
  let stderr = '';
  // The same database and, on a restart, the same address: a restarted collector.
  const serve = (listen) => new Promise((resolve, reject) => {
    child = spawn(BIN, ['serve', '--db', db, '--listen', listen, '--rate-limit-api', '0', '--rate-limit-ingest', '0', ...(demo ? ['--demo'] : []), ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stderr.on('data', (d) => { stderr += d; });
    let out = '';
    const timer = setTimeout(() => reject(new Error(`postern did not start:\n${stderr}`)), 60000);
    child.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/postern listening on (http:\/\/\S+)/);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    child.on('exit', (code) => { clearTimeout(timer); reject(new Error(`postern exited with ${code}:\n${stderr}`)); });
  });
  const halt = async () => {
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
  };
  const url = await serve('127.0.0.1:0');
  const api = async (p, opts = {}) => {
    const res = await fetch(url + p, {
      ...opts,
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...(opts.headers || {}) },
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`${opts.method || 'GET'} ${p} answered ${res.status}: ${text}`);
    return text ? JSON.parse(text) : null;
  };
  const postern = {
    url, key, db, api,
    stderr: () => stderr,
    async createSite(wall) {
      const s = await api('/v1/sites', { method: 'POST', body: JSON.stringify({ name: 'Browser test', domain: PUBLISHER_HOST, timezone: 'UTC' }) });
      if (wall) await api(`/v1/sites/${s.id}`, { method: 'PATCH', body: JSON.stringify({ wall }) });
      return s.id;
    },
    /** The raw events of a site, oldest first. */
    async events(siteId) {
      const r = await api(`/v1/events/sites/${siteId}?limit=1000`);
      return r.events.slice().reverse();
    },
    async dashboard(siteId) {
      return (await api(`/v1/analytics/sites/${siteId}/dashboard?days=1`)).metrics;
    },
    /** Stops the collector, keeping its database, until `start()`. */
    halt,
    async start() {
      await serve(new URL(url).host);
    },
    async stop() {
      await halt();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
  if (site) postern.siteId = await postern.createSite();
  return postern;
}

/** A publisher's site on another origin: `pages` maps a path to its HTML,
 *  or to `{ type, body }` for other files. `requests` lists what it was asked. */
async function startPublisher(pages) {
  const requests = [];
  const server = http.createServer((req, res) => {
    requests.push({ at: Date.now(), method: req.method, url: req.url, headers: req.headers });
    if (req.url === '/favicon.ico') return res.writeHead(204).end();
    const page = pages[new URL(req.url, 'http://x').pathname];
    if (page === undefined) return res.writeHead(404).end('not found');
    const { type, body } = typeof page === 'string' ? { type: 'text/html; charset=utf-8', body: page } : page;
    res.writeHead(200, { 'content-type': type, 'cache-control': 'no-store' });
    res.end(body);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    origin: `http://${PUBLISHER_HOST}:${server.address().port}`,
    requests,
    stop: () => new Promise((r) => server.close(r)),
  };
}

/** An article page embedding the SDK with the script tag. */
function articlePage(collectorUrl, siteId, title = 'An article') {
  return `<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>${title}</title>
<script async src="${collectorUrl}/p/v1.js" data-site-id="${siteId}"></script></head>
<body><h1>${title}</h1>${'<p>Some reporting worth reading. '.repeat(40)}</p><a href="/other">Another article</a></body></html>`;
}

/** Chromium's flags for every test browser: root without a sandbox, no network of its own, `*.test` on loopback. */
const CHROMIUM_ARGS = [
  '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--host-resolver-rules=MAP *.test 127.0.0.1',
];

async function launchBrowser() {
  // launch() gives every browser a fresh temporary profile (--user-data-dir).
  return chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
}

// --- Chromium without DevTools: Chromium refuses some features (prerendering)
// to a page a DevTools session is attached to, so such tests watch from the servers ---

/** Headless Chromium, with a fresh profile and no DevTools protocol, showing `url`. */
function launchBareChromium(url) {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'postern-chromium-'));
  const child = spawn(CHROMIUM, ['--headless', ...CHROMIUM_ARGS, `--user-data-dir=${profile}`, url], { stdio: 'ignore', detached: true });
  const exited = new Promise((r) => child.once('exit', r));
  return {
    async close() {
      // Its whole process group: the browser's helpers would outlive it a moment, still writing to the profile.
      try { process.kill(-child.pid, 'SIGKILL'); } catch { /* already gone */ }
      await exited;
      fs.rmSync(profile, { recursive: true, force: true, maxRetries: 5 });
    },
  };
}

/** A proxy in front of `target` (the collector) on 127.0.0.1: `requests` lists
 *  what it was asked, with the time each request arrived and its headers. */
async function startRecordingProxy(target) {
  const requests = [];
  const server = http.createServer((req, res) => {
    requests.push({ at: Date.now(), method: req.method, path: new URL(req.url, 'http://x').pathname, headers: req.headers });
    const upstream = http.request(target + req.url, { method: req.method, headers: { ...req.headers, host: new URL(target).host } }, (r) => {
      res.writeHead(r.statusCode, r.headers);
      r.pipe(res);
    });
    upstream.on('error', () => res.destroy());
    req.pipe(upstream);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    requests,
    stop: () => new Promise((r) => { server.closeAllConnections(); server.close(r); }),
  };
}

/** A page in a fresh context (so a fresh localStorage: a new visitor).
 *  `page.assertClean()` fails the test if the page logged a console error
 *  or threw an uncaught error. */
async function openPage(browser, url, t, { viewport, block } = {}) {
  const context = await browser.newContext(viewport ? { viewport } : {});
  const page = await context.newPage();
  const problems = [];
  page.on('console', (m) => {
    // Chromium logs every request a blocker refuses; with a simulated blocker that is expected.
    if (m.type() === 'error' && !m.text().includes('ERR_BLOCKED_BY_CLIENT')) problems.push(`console.error: ${m.text()}`);
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  if (block) await block(page);
  if (url) await page.goto(url);
  t.after(() => context.close());
  page.problems = problems;
  page.assertClean = () => {
    if (problems.length) throw new Error(`the page logged errors:\n${problems.join('\n')}`);
  };
  return page;
}

/** Saves a screenshot under tests/browser/artifacts/. */
async function screenshot(page, name) {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: false });
}

// --- Simulated blockers (tests/filter-lists proves the real lists act on the same bait) ---

/** The bait request paths of every set, as route patterns. */
const baitRoutes = () => BAIT.sets.map((set) => `**${set.request_path}*`);

/** A network blocker: the bait requests fail as a blocker makes them fail. */
async function blockBaitRequest(page) {
  for (const r of baitRoutes()) await page.route(r, (route) => route.abort('blockedbyclient'));
}

async function unblockBaitRequest(page) {
  for (const r of baitRoutes()) await page.unroute(r);
}

/** The CSS selectors of a bait set's element (its classes and id). */
function baitSelectors(set) {
  return [...set.element.classes.map((c) => `.${c}`), `#${set.element.id}`];
}

/** A cosmetic filter, as EasyList's generic rules hide the bait's classes and id
 *  (every set's, or only `sets`'). */
async function hideBaitElement(page, sets = BAIT.sets) {
  const selectors = sets.flatMap(baitSelectors).join(',');
  await page.addInitScript((css) => {
    const style = () => {
      const s = document.createElement('style');
      s.textContent = css;
      document.documentElement.appendChild(s);
    };
    if (document.documentElement) style(); else document.addEventListener('DOMContentLoaded', style);
  }, `${selectors}{display:none!important}`);
}

// --- The wall lives in a closed shadow root; the DevTools protocol still reaches it ---

async function wallRoot(page) {
  const cdp = await page.context().newCDPSession(page);
  const { root } = await cdp.send('DOM.getDocument', { depth: -1, pierce: true });
  const find = (n) => {
    if (n.attributes && n.attributes.includes('data-postern-wall')) return n;
    // Same-origin frames (the dashboard's wall preview) are searched too.
    for (const c of [...(n.children || []), ...(n.contentDocument ? [n.contentDocument] : [])]) { const f = find(c); if (f) return f; }
    return null;
  };
  const host = find(root);
  if (!host) { await cdp.detach(); return null; }
  return { cdp, host, shadow: host.shadowRoots && host.shadowRoots[0] };
}

/** Runs `fn` with `this` bound to the wall's (closed) shadow root. */
async function inWall(page, fn, arg) {
  const w = await wallRoot(page);
  if (!w) return undefined;
  try {
    const { object } = await w.cdp.send('DOM.resolveNode', { backendNodeId: w.shadow.backendNodeId });
    const r = await w.cdp.send('Runtime.callFunctionOn', {
      objectId: object.objectId, functionDeclaration: fn.toString(), arguments: [{ value: arg }], returnByValue: true, awaitPromise: true,
    });
    if (r.exceptionDetails) throw new Error(r.exceptionDetails.exception.description);
    return r.result.value;
  } finally {
    await w.cdp.detach();
  }
}

async function wallOpen(page) {
  return page.evaluate(() => !!document.querySelector('[data-postern-wall]'));
}

async function waitForWall(page, open = true, timeout = 10000) {
  await page.waitForFunction((o) => !!document.querySelector('[data-postern-wall]') === o, open, { timeout });
}

/** Clicks a control of the wall with the mouse, where it is on screen. */
async function clickInWall(page, selector) {
  const box = await inWall(page, function (sel) {
    const el = this.querySelector(sel);
    if (!el) return null;
    const r = el.getBoundingClientRect();
    return { x: r.x + r.width / 2, y: r.y + r.height / 2, w: r.width, h: r.height };
  }, selector);
  if (!box || !box.w) throw new Error(`no visible ${selector} in the wall`);
  await page.mouse.click(box.x, box.y);
}

async function wallText(page) {
  return inWall(page, function () { return this.querySelector('.d').textContent; });
}

/** Polls `fn` until it returns a truthy value (events are written asynchronously). */
async function eventually(fn, { timeout = 10000, interval = 100 } = {}) {
  const end = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      if (Date.now() > end) throw e;
    }
    if (Date.now() > end) throw new Error(`timed out; last value: ${JSON.stringify(last)}`);
    await new Promise((r) => setTimeout(r, interval));
  }
}

/** What the SDK's page tests start once per file: a collector without a
 *  site, Chromium, and a publisher of another origin serving `pages`. */
async function startSuite(pages) {
  const started = {};
  try {
    started.postern = await startPostern({ site: false });
    started.browser = await launchBrowser();
    started.publisher = await startPublisher(pages);
    return started;
  } catch (e) {
    await stopSuite(started);
    throw e;
  }
}

/** Stops whatever `startSuite` started. */
async function stopSuite({ postern, browser, publisher }) {
  await browser?.close();
  await publisher?.stop();
  await postern?.stop();
}

module.exports = {
  ROOT, BAIT, startPostern, startPublisher, startSuite, stopSuite, articlePage, launchBrowser, launchBareChromium, startRecordingProxy, openPage, screenshot,
  blockBaitRequest, unblockBaitRequest, hideBaitElement, baitSelectors, inWall, wallOpen, waitForWall, clickInWall, wallText, eventually,
};
