// The truth test: a real blocker, not a simulation. Debian's uBlock Origin,
// with the filter lists it ships, in real Firefox; a publisher's page on a
// non-loopback host name embeds the SDK from the real collector, also reached
// by name. With uBlock Origin every load must say blocked (by an extension:
// uBlock hides the bait element) and show the wall, which its cosmetic
// filters cannot reach; without it every load must be clean. The SDK's own
// requests must get through in both cases: the collector records each visit.
'use strict';

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const h = require('./harness');
const ff = require('./firefox');

const LOADS = 5;

let postern;
let publisher;
let withUblock;
let without;
const pages = {};

before(async () => {
  postern = await h.startPostern({ site: false });
  publisher = await h.startPublisher(pages);
  [withUblock, without] = await Promise.all([ff.launchFirefox({ ublock: true }), ff.launchFirefox()]);
  // uBlock Origin reads its lists after it starts: wait until it hides an
  // element its lists hide (the SDK's bait, alone on a page without the SDK).
  const e = h.BAIT.sets[0].element;
  pages['/probe'] = `<!doctype html><html><head><meta charset="utf-8"><title>probe</title></head><body>
<div id="${e.id}" class="${e.classes.join(' ')}" style="width:${e.width}px;height:${e.height}px">&nbsp;</div></body></html>`;
  await ff.waitForUblock(withUblock, `${publisher.origin}/probe`, e.id);
});

after(async () => {
  await withUblock?.close();
  await without?.close();
  await publisher?.stop();
  await postern?.stop();
});

/** A site of its own with its article page; the SDK comes from postern.test. */
async function newSite(name) {
  const siteId = await postern.createSite();
  pages[`/${name}`] = h.articlePage(ff.named(postern.url, 'postern.test'), siteId, name);
  return { siteId, url: `${publisher.origin}/${name}` };
}

async function countEvents(siteId, expected) {
  const count = (events) => {
    const n = {};
    for (const e of events) n[e.event_type] = (n[e.event_type] || 0) + 1;
    return n;
  };
  const total = (n) => Object.values(n).reduce((a, b) => a + b, 0);
  try {
    await h.eventually(async () => total(count(await postern.events(siteId))) >= total(expected));
  } catch {
    // the assertion below prints what arrived
  }
  // Anything sent late would show up now.
  await new Promise((r) => setTimeout(r, 300));
  assert.deepEqual(count(await postern.events(siteId)), expected);
}

test(`with uBlock Origin in Firefox: blocked by an extension and the wall shown, ${LOADS} loads of ${LOADS}`, async () => {
  const site = await newSite('with-ublock');
  for (let i = 0; i < LOADS; i++) {
    // uBlock refuses the bait requests, which Firefox reports as the page's errors.
    const page = await ff.openPage(withUblock, site.url, { expected: (text) => h.BAIT.sets.some((set) => text.includes(set.request_path)) });
    try {
      const verdict = await page.evaluate(() => window.Postern.check());
      assert.deepEqual(verdict, { blocked: true, blockerType: 'extension' }, `load ${i + 1}`);
      // The wall's host is in the page and not hidden by uBlock's cosmetic filters.
      await page.waitForFunction(() => {
        const wall = document.querySelector('[data-postern-wall]');
        return wall && getComputedStyle(wall).display !== 'none' && getComputedStyle(wall).visibility !== 'hidden';
      }, { timeout: 10000 });
      page.assertClean();
    } finally {
      await page.browserContext().close();
    }
  }
  await countEvents(site.siteId, { pageview: LOADS, adblock_detected: LOADS, wall_displayed: LOADS });
});

test(`without a blocker in Firefox: clean and no wall, ${LOADS} loads of ${LOADS}`, async () => {
  const site = await newSite('without-blocker');
  for (let i = 0; i < LOADS; i++) {
    const page = await ff.openPage(without, site.url);
    try {
      const verdict = await page.evaluate(() => window.Postern.check());
      assert.deepEqual(verdict, { blocked: false, blockerType: null }, `load ${i + 1}`);
      assert.equal(await page.evaluate(() => !!document.querySelector('[data-postern-wall]')), false, `load ${i + 1}`);
      page.assertClean();
    } finally {
      await page.browserContext().close();
    }
  }
  await countEvents(site.siteId, { pageview: LOADS });
});
