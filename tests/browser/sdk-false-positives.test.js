// Visitors without a blocker, on ordinary pages and networks, are never
// walled: real headless Chromium, the real collector, a publisher's page of
// another origin. Each test is a situation in which a probe without its
// control would have read "blocked"; each expects an undecided or clean
// verdict, no wall and no adblock_detected.
'use strict';

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const h = require('./harness');

let postern;
let browser;
let publisher;
const pages = {};

before(async () => {
  ({ postern, browser, publisher } = await h.startSuite(pages));
});

after(() => h.stopSuite({ postern, browser, publisher }));

const wall = {
  kind: 'soft', dismiss_after_seconds: 0,
  variants: [{ name: 'control', weight: 1, title: 'Please allow us', body: 'We need ads' }],
};

/** A site of its own with an article page; `head` goes into the page's head. */
async function newSite(name, head = '') {
  const siteId = await postern.createSite(wall);
  pages[`/${name}`] = h.articlePage(postern.url, siteId, name).replace('<head>', `<head>${head}`);
  return { siteId, url: `${publisher.origin}/${name}` };
}

const types = async (siteId) => (await postern.events(siteId)).map((e) => e.event_type);

/** Waits until `pageview` arrived, lets anything late arrive, and checks that
 *  nothing says blocked. */
async function expectNoBlockerSeen(siteId) {
  await h.eventually(async () => (await types(siteId)).includes('pageview'));
  await new Promise((r) => setTimeout(r, 300));
  const got = await types(siteId);
  assert.ok(!got.includes('adblock_detected') && !got.includes('wall_displayed'), `events: ${got}`);
  const m = await postern.dashboard(siteId);
  assert.deepEqual([m.adblock_detected, m.walls_displayed], [0, 0]);
}

/** The probe requests the page made (bait sets and control). */
function probeRequests(page) {
  const seen = [];
  page.on('request', (r) => {
    const p = new URL(r.url()).pathname;
    if (h.BAIT.sets.some((s) => s.request_path === p) || p === h.BAIT.control.request_path) seen.push(p);
  });
  return seen;
}

test('a clean baseline: clean verdict, no wall, only a pageview', async (t) => {
  const site = await newSite('baseline');
  // Watched from before the page loads: the SDK's own check at load may run before this test's.
  const page = await h.openPage(browser, null, t);
  const probes = probeRequests(page);
  await page.goto(site.url);
  assert.deepEqual(await page.evaluate(() => window.Postern.check()), { blocked: false, blockerType: null });
  assert.equal(await h.wallOpen(page), false);
  await expectNoBlockerSeen(site.siteId);
  assert.deepEqual(await types(site.siteId), ['pageview']);
  const expected = [...h.BAIT.sets.map((s) => s.request_path), h.BAIT.control.request_path].sort();
  const checks = probes.length / expected.length;
  assert.ok(checks >= 1 && Number.isInteger(checks), `whole checks only: ${probes}`);
  assert.deepEqual(probes.slice().sort(), expected.flatMap((p) => Array(checks).fill(p)).sort(),
    'each check requests each bait set and the control once');
  page.assertClean();
});

test("a page CSP with style-src 'self': the bait is still laid out, the verdict is clean", async (t) => {
  const site = await newSite('csp', `<meta http-equiv="Content-Security-Policy" content="style-src 'self'">`);
  const page = await h.openPage(browser, site.url, t);
  const violations = [];
  await page.exposeFunction('cspViolation', (v) => violations.push(v));
  await page.evaluate(() => document.addEventListener('securitypolicyviolation', (e) => window.cspViolation(`${e.violatedDirective} ${e.sample}`)));
  assert.deepEqual(await page.evaluate(() => window.Postern.check()), { blocked: false, blockerType: null });
  assert.equal(await h.wallOpen(page), false);
  assert.deepEqual(violations, [], 'the probe styles its elements through CSSOM, which the CSP allows');
  await expectNoBlockerSeen(site.siteId);
  page.assertClean();
});

for (const [i, which] of [[0, 'first'], [1, 'second']]) {
  test(`the publisher's own CSS hides the ${which} bait set's class: no verdict, no wall`, async (t) => {
    const set = h.BAIT.sets[i];
    const site = await newSite(`own-css-${i}`, `<style>.${set.element.classes[0]}{display:none}</style>`);
    const page = await h.openPage(browser, site.url, t);
    assert.deepEqual(await page.evaluate(() => window.Postern.check()), { blocked: false, blockerType: 'unknown' });
    assert.equal(await h.wallOpen(page), false);
    await expectNoBlockerSeen(site.siteId);
    page.assertClean();
  });
}

test('one bait request set blocked, the other loaded: no verdict, no wall', async (t) => {
  const site = await newSite('one-path');
  const page = await h.openPage(browser, site.url, t, {
    block: (p) => p.route(`**${h.BAIT.sets[0].request_path}*`, (r) => r.abort('blockedbyclient')),
  });
  assert.deepEqual(await page.evaluate(() => window.Postern.check()), { blocked: false, blockerType: 'unknown' });
  assert.equal(await h.wallOpen(page), false);
  await expectNoBlockerSeen(site.siteId);
});

test('every collector request reset after the page loaded: unknown, no wall', async (t) => {
  const site = await newSite('reset');
  const page = await h.openPage(browser, site.url, t);
  // The check that started by itself after load has ended.
  assert.deepEqual(await page.evaluate(() => window.Postern.check()), { blocked: false, blockerType: null });
  await page.route(`${postern.url}/**`, (r) => r.abort('connectionreset'));
  assert.deepEqual(await page.evaluate(() => window.Postern.check()), { blocked: false, blockerType: 'unknown' });
  assert.equal(await h.wallOpen(page), false);
  await page.unroute(`${postern.url}/**`);
  await expectNoBlockerSeen(site.siteId);
});

test('going offline after the page loaded: unknown, no wall', async (t) => {
  const site = await newSite('offline');
  const page = await h.openPage(browser, site.url, t);
  assert.deepEqual(await page.evaluate(() => window.Postern.check()), { blocked: false, blockerType: null });
  await page.context().setOffline(true);
  assert.deepEqual(await page.evaluate(() => window.Postern.check()), { blocked: false, blockerType: 'unknown' });
  assert.equal(await h.wallOpen(page), false);
  await page.context().setOffline(false);
  await expectNoBlockerSeen(site.siteId);
});

test('the collector restarted: a returning visitor within five minutes is not walled', async (t) => {
  // A collector of its own: the others' tests must not see it stop.
  const own = await h.startPostern({ site: false });
  t.after(() => own.stop());
  const siteId = await own.createSite(wall);
  pages['/restart'] = h.articlePage(own.url, siteId, 'restart');
  const page = await h.openPage(browser, `${publisher.origin}/restart`, t);
  assert.deepEqual(await page.evaluate(() => window.Postern.check()), { blocked: false, blockerType: null });
  await h.eventually(async () => (await own.events(siteId)).length >= 1);

  // Stopped: the SDK's files come from the HTTP cache, the probes cannot reach it.
  await own.halt();
  await page.reload();
  assert.deepEqual(await page.evaluate(() => window.Postern.check()), { blocked: false, blockerType: 'unknown' });
  assert.equal(await h.wallOpen(page), false);

  // Started again, same address and database: the next check is clean.
  await own.start();
  assert.deepEqual(await page.evaluate(() => window.Postern.check()), { blocked: false, blockerType: null });
  await page.reload();
  assert.deepEqual(await page.evaluate(() => window.Postern.check()), { blocked: false, blockerType: null });
  assert.equal(await h.wallOpen(page), false);
  await new Promise((r) => setTimeout(r, 300));
  const got = (await own.events(siteId)).map((e) => e.event_type);
  assert.ok(got.length >= 2 && got.every((e) => e === 'pageview'), `events: ${got}`);
});

test('a clean visitor is not checked again when the tab becomes visible; a blocked one is', async (t) => {
  const clean = await newSite('visible-clean');
  const page = await h.openPage(browser, null, t);
  const probes = probeRequests(page);
  await page.goto(clean.url);
  await page.evaluate(() => window.Postern.check());
  const before = probes.length;
  assert.ok(before >= 3, `probed: ${probes}`);
  await page.evaluate(() => document.dispatchEvent(new Event('visibilitychange')));
  await new Promise((r) => setTimeout(r, 1500));
  assert.equal(probes.length, before, 'no new probe for a clean visitor');

  const blocked = await newSite('visible-blocked');
  const bpage = await h.openPage(browser, blocked.url, t, { block: h.blockBaitRequest });
  const bprobes = probeRequests(bpage);
  assert.deepEqual(await bpage.evaluate(() => window.Postern.check()), { blocked: true, blockerType: 'network' });
  await h.waitForWall(bpage);
  const bbefore = bprobes.length;
  await bpage.evaluate(() => document.dispatchEvent(new Event('visibilitychange')));
  await h.eventually(async () => bprobes.length > bbefore);
});

test("nothing but the loader is fetched before the page's load event", async (t) => {
  const siteId = await postern.createSite(wall);
  // An image that takes a second holds the page's load event back.
  pages['/slow'] = h.articlePage(postern.url, siteId, 'slow').replace('</body>', '<img src="/slow.png" alt=""></body>');
  const page = await h.openPage(browser, null, t);
  await page.route('**/slow.png', async (r) => {
    await new Promise((ok) => setTimeout(ok, 1000));
    await r.fulfill({ status: 204 });
  });
  await page.goto(`${publisher.origin}/slow`);
  await page.evaluate(() => window.Postern.check());
  const timing = await page.evaluate((origin) => ({
    load: performance.getEntriesByType('navigation')[0].loadEventStart,
    fetched: performance.getEntriesByType('resource')
      .filter((e) => e.name.startsWith(origin) && !e.name.endsWith('/p/v1.js'))
      .map((e) => [e.name, e.startTime]),
  }), postern.url);
  assert.ok(timing.load > 900, `the slow image held load back: ${timing.load}`);
  assert.ok(timing.fetched.length >= 4, `the SDK fetched its files and probes: ${JSON.stringify(timing.fetched)}`);
  for (const [name, start] of timing.fetched) assert.ok(start >= timing.load, `${name} fetched at ${start}, before load at ${timing.load}`);
});

test("a blocker that blocks the SDK's own wasm: no wall, sdk_blocked counted", async (t) => {
  const site = await newSite('sdk-blocked');
  const page = await h.openPage(browser, site.url, t, {
    block: (p) => p.route(/\/p\/postern-[^/]+\.wasm/, (r) => r.abort('blockedbyclient')),
  });
  assert.deepEqual(await page.evaluate(() => window.Postern.check()), { blocked: false, blockerType: 'unknown' });
  assert.equal(await h.wallOpen(page), false);
  await h.eventually(async () => (await types(site.siteId)).includes('sdk_blocked'));
  const [e] = await postern.events(site.siteId);
  assert.deepEqual([e.event_type, e.page_url], ['sdk_blocked', site.url]);
  const metrics = await (await fetch(`${postern.url}/metrics`)).text();
  assert.match(metrics, /^postern_sdk_blocked_total [1-9]/m);
});

test('the SDK blocked while the collector is unreachable too: nothing is sent', async (t) => {
  const site = await newSite('sdk-and-collector');
  const page = await h.openPage(browser, site.url, t, {
    block: async (p) => {
      await p.route(/\/p\/postern-[^/]+\.wasm/, (r) => r.abort('blockedbyclient'));
      await p.route(/\/p\/echo\.js|\/v1\/e/, (r) => r.abort('internetdisconnected'));
    },
  });
  const sent = [];
  page.on('request', (r) => { if (r.url().endsWith('/v1/e')) sent.push(r.url()); });
  assert.deepEqual(await page.evaluate(() => window.Postern.check()), { blocked: false, blockerType: 'unknown' });
  await new Promise((r) => setTimeout(r, 1000));
  assert.deepEqual(sent, [], 'no event when the collector does not answer the fresh request');
});
