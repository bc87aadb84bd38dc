// The demo publisher site served by `postern serve --demo`: articles with the
// script tag of the demo site; a blocked visitor sees the wall, and
// Postern.forceDisplay() / hide() work from the console.
'use strict';

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const h = require('./harness');

let postern;
let browser;

before(async () => {
  postern = await h.startPostern({ demo: true, site: false });
  browser = await h.launchBrowser();
});

after(async () => {
  await browser?.close();
  await postern?.stop();
});

// The demo site's domain is `localhost`, so the pages are opened by that name.
const demoUrl = (p) => postern.url.replace('127.0.0.1', 'localhost') + p;

test('the demo article shows the wall to a blocked visitor only', async (t) => {
  const clean = await h.openPage(browser, demoUrl('/demo/harbour-bridge.html'), t);
  assert.deepEqual(await clean.evaluate(() => window.Postern.check()), { blocked: false, blockerType: null });
  assert.equal(await h.wallOpen(clean), false);
  await clean.evaluate(() => window.Postern.forceDisplay());
  await h.waitForWall(clean);
  await clean.evaluate(() => window.Postern.hide());
  await h.waitForWall(clean, false);
  clean.assertClean();

  const blocked = await h.openPage(browser, demoUrl('/demo/night-trains.html'), t, { block: h.blockBaitRequest });
  assert.deepEqual(await blocked.evaluate(() => window.Postern.check()), { blocked: true, blockerType: 'network' });
  await h.waitForWall(blocked);
  await h.screenshot(blocked, 'demo-wall');
  blocked.assertClean();
});

test('the demo subscribe page is excluded from the wall', async (t) => {
  const page = await h.openPage(browser, demoUrl('/demo/subscribe.html'), t, { block: h.blockBaitRequest });
  assert.deepEqual(await page.evaluate(() => window.Postern.check()), { blocked: true, blockerType: 'network' });
  assert.equal(await h.wallOpen(page), false);
  page.assertClean();
});
