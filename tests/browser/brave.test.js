// Brave's own blocking (Shields), as far as it can be tried without Brave:
// Chromium with Brave's `navigator.brave` object, Shields blocking the bait
// request or, shields down, blocking nothing. The verdict's wiring to
// `navigator.brave` is what this proves; Brave's filtering itself is the
// same EasyList-based lists tests/filter-lists checks.
'use strict';

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const h = require('./harness');

let postern;
let browser;
let publisher;
const pages = {};

before(async () => {
  postern = await h.startPostern({ site: false });
  browser = await h.launchBrowser();
  publisher = await h.startPublisher(pages);
});

after(async () => {
  await browser?.close();
  await publisher?.stop();
  await postern?.stop();
});

/** What Brave adds to every page: `navigator.brave.isBrave()`. */
async function asBrave(page) {
  await page.addInitScript(() => {
    Object.defineProperty(Navigator.prototype, 'brave', { value: { isBrave: () => Promise.resolve(true) }, configurable: true });
  });
}

async function newSite(name) {
  const siteId = await postern.createSite({ kind: 'soft', dismiss_after_seconds: 0, variants: [{ name: 'control', weight: 1, title: 'Please allow us', body: 'Ads pay for this site.' }] });
  pages[`/${name}`] = h.articlePage(postern.url, siteId, name);
  return { siteId, url: `${publisher.origin}/${name}` };
}

async function eventTypes(siteId, n) {
  let events = [];
  await h.eventually(async () => (events = await postern.events(siteId)).length >= n);
  await new Promise((r) => setTimeout(r, 300));
  return (await postern.events(siteId)).map((e) => e.event_type).sort();
}

test('Brave with Shields up: blocked by the browser, the wall explains Shields', async (t) => {
  const site = await newSite('brave-shields-up');
  const page = await h.openPage(browser, site.url, t, {
    block: async (p) => {
      await asBrave(p);
      await h.blockBaitRequest(p);
    },
  });
  assert.equal(await page.evaluate(() => typeof navigator.brave.isBrave), 'function');
  assert.deepEqual(await page.evaluate(() => window.Postern.check()), { blocked: true, blockerType: 'browser' });
  await h.waitForWall(page);
  assert.match(await h.wallText(page), /shield icon/, 'the Shields instructions');
  assert.deepEqual(await eventTypes(site.siteId, 3), ['adblock_detected', 'pageview', 'wall_displayed']);
  const detected = (await postern.events(site.siteId)).find((e) => e.event_type === 'adblock_detected');
  assert.equal(detected.metadata.blocker_type, 'browser');
  page.assertClean();
});

test('Brave with Shields down: clean, no wall', async (t) => {
  const site = await newSite('brave-shields-down');
  const page = await h.openPage(browser, site.url, t, { block: asBrave });
  assert.deepEqual(await page.evaluate(() => window.Postern.check()), { blocked: false, blockerType: null });
  assert.equal(await h.wallOpen(page), false);
  assert.deepEqual(await eventTypes(site.siteId, 1), ['pageview']);
  page.assertClean();
});
