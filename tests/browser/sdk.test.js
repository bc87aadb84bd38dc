// The SDK in real headless Chromium against the real collector: a page of
// another origin embeds the script tag; blockers are simulated the way they
// act (tests/filter-lists proves real lists act on this bait).
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

/** A site of its own for each test, so its counts are exactly the test's. */
async function newSite(name, wall) {
  const siteId = await postern.createSite(wall);
  pages[`/${name}`] = h.articlePage(postern.url, siteId, name);
  pages[`/${name}/other`] = h.articlePage(postern.url, siteId, `${name}, page 2`);
  return { siteId, url: `${publisher.origin}/${name}` };
}

const types = (events, session) => events.filter((e) => !session || e.session_id === session).map((e) => e.event_type);

/** Waits until the site's events are exactly `expected`. Events sent at the
 *  same moment travel as separate requests, so only their set is compared. */
async function expectEvents(siteId, expected) {
  let got;
  try {
    await h.eventually(async () => {
      got = types(await postern.events(siteId));
      return got.length >= expected.length;
    });
  } catch {
    // fall through to the assertion, which prints what arrived
  }
  // Anything sent late would show up now.
  await new Promise((r) => setTimeout(r, 300));
  got = await postern.events(siteId);
  assert.deepEqual(types(got).sort(), expected.slice().sort(), `events: ${types(got)}`);
  return got;
}

const wallDefaults = { kind: 'soft', dismiss_after_seconds: 0 };
const variants = [
  { name: 'control', weight: 1, title: 'Control title', body: 'Control body' },
  { name: 'emotional', weight: 1, title: 'Emotional title', body: 'Emotional body' },
  { name: 'offer', weight: 1, title: 'Offer title', body: 'Offer body', subscribe_url: '/subscribe', subscribe_text: 'Go ad-free' },
];

test('without a blocker: a pageview, a clean verdict, no wall', async (t) => {
  const site = await newSite('clean');
  const page = await h.openPage(browser, site.url, t);
  const verdict = await page.evaluate(() => window.Postern.check());
  assert.deepEqual(verdict, { blocked: false, blockerType: null });
  const session = await page.evaluate(() => window.Postern.getSessionId());
  assert.match(session, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.equal(await h.wallOpen(page), false);
  const events = await expectEvents(site.siteId, ['pageview']);
  assert.equal(events[0].session_id, session);
  assert.ok(events[0].page_url.startsWith(publisher.origin), 'page_url is the publisher page');
  const m = await postern.dashboard(site.siteId);
  assert.equal(m.sessions, 1);
  assert.equal(m.adblock_detected, 0);
  assert.equal(m.walls_displayed, 0);
  page.assertClean();
});

test('a blocked bait request: the wall, adblock_detected with network', async (t) => {
  const site = await newSite('network', { ...wallDefaults, variants });
  const page = await h.openPage(browser, site.url, t, { block: h.blockBaitRequest });
  const verdict = await page.evaluate(() => window.Postern.check());
  assert.deepEqual(verdict, { blocked: true, blockerType: 'network' });
  await h.waitForWall(page);
  await h.screenshot(page, 'wall-network');
  const text = await h.wallText(page);
  assert.match(text, /request filter/, 'request-filter instructions');
  assert.doesNotMatch(text, /DNS/, 'a first-party probe cannot see DNS blockers');
  const events = await expectEvents(site.siteId, ['pageview', 'adblock_detected', 'wall_displayed']);
  const of = (type) => events.find((e) => e.event_type === type);
  assert.equal(of('adblock_detected').metadata.blocker_type, 'network');
  const variant = of('wall_displayed').metadata.variant;
  assert.ok(variants.some((v) => v.name === variant && text.includes(v.title)), `the wall shows variant ${variant}: ${text}`);
  const m = await postern.dashboard(site.siteId);
  assert.deepEqual([m.sessions, m.adblock_detected, m.walls_displayed, m.conversions], [1, 1, 1, 0]);
  page.assertClean();
});

test('a bait element hidden by a cosmetic filter: extension', async (t) => {
  const site = await newSite('extension', { ...wallDefaults, variants });
  const page = await h.openPage(browser, site.url, t, { block: h.hideBaitElement });
  const verdict = await page.evaluate(() => window.Postern.check());
  assert.deepEqual(verdict, { blocked: true, blockerType: 'extension' });
  await h.waitForWall(page);
  const events = await expectEvents(site.siteId, ['pageview', 'adblock_detected', 'wall_displayed']);
  assert.equal(events.find((e) => e.event_type === 'adblock_detected').metadata.blocker_type, 'extension');
  page.assertClean();
});

test("a blocker's stand-in script (no nonce) counts as blocked", async (t) => {
  const site = await newSite('standin', { ...wallDefaults, variants });
  const page = await h.openPage(browser, site.url, t, {
    block: async (p) => {
      for (const set of h.BAIT.sets) {
        await p.route(`**${set.request_path}*`, (r) => r.fulfill({ status: 200, contentType: 'text/javascript', body: '(function(){})();' }));
      }
    },
  });
  assert.deepEqual(await page.evaluate(() => window.Postern.check()), { blocked: true, blockerType: 'network' });
  await h.waitForWall(page);
  page.assertClean();
});

test('a collector that cannot be reached decides nothing and shows nothing', async (t) => {
  const site = await newSite('offline', { ...wallDefaults, variants });
  const page = await h.openPage(browser, site.url, t, {
    // Everything the SDK asks the collector after loading fails, as offline
    // (the control request included: it is what tells a blocker from a dead network).
    block: (p) => p.route(/\/(v1|ads)\/|\/p\/echo\.js/, (r) => r.abort('internetdisconnected')),
  });
  assert.deepEqual(await page.evaluate(() => window.Postern.check()), { blocked: false, blockerType: 'unknown' });
  assert.equal(await h.wallOpen(page), false);
});

test('block, wall, allow, "I have allowed": conversion_allowlist once, also after a reload', async (t) => {
  const site = await newSite('allow', { ...wallDefaults, variants });
  const page = await h.openPage(browser, site.url, t, { block: h.blockBaitRequest });
  await page.evaluate(() => window.Postern.check());
  await h.waitForWall(page);
  // Still blocked: the re-check fails and says so.
  await h.clickInWall(page, '[data-a=recheck]');
  await h.eventually(async () => /still blocks/.test(await h.wallText(page)));
  // The visitor allows the site, then clicks again.
  await h.unblockBaitRequest(page);
  await h.clickInWall(page, '[data-a=recheck]');
  await h.waitForWall(page, false);
  await expectEvents(site.siteId, ['pageview', 'adblock_detected', 'wall_displayed', 'verification_failed', 'conversion_allowlist']);
  await page.reload();
  assert.deepEqual(await page.evaluate(() => window.Postern.check()), { blocked: false, blockerType: null });
  assert.equal(await h.wallOpen(page), false);
  const events = await expectEvents(site.siteId, ['pageview', 'adblock_detected', 'wall_displayed', 'verification_failed', 'conversion_allowlist', 'pageview']);
  assert.equal(new Set(events.map((e) => e.session_id)).size, 1, 'one session across the reload');
  const m = await postern.dashboard(site.siteId);
  assert.deepEqual([m.sessions, m.adblock_detected, m.walls_displayed, m.conversions, m.conversion_rate], [1, 1, 1, 1, 100]);
  page.assertClean();
});

test('allow-listing then reloading converts on the next page, once', async (t) => {
  const site = await newSite('reload', { ...wallDefaults, variants });
  const page = await h.openPage(browser, site.url, t, { block: h.blockBaitRequest });
  await page.evaluate(() => window.Postern.check());
  await h.waitForWall(page);
  await h.unblockBaitRequest(page);
  await page.reload();
  await page.evaluate(() => window.Postern.check());
  await page.goto(`${site.url}/other`);
  await page.evaluate(() => window.Postern.check());
  await expectEvents(site.siteId, ['pageview', 'adblock_detected', 'wall_displayed', 'pageview', 'conversion_allowlist', 'pageview']);
  page.assertClean();
});

test('a soft wall: dismissed by its button, then not shown again in the session', async (t) => {
  const site = await newSite('dismiss', { ...wallDefaults, variants });
  const page = await h.openPage(browser, site.url, t, { block: h.blockBaitRequest });
  await page.evaluate(() => window.Postern.check());
  await h.waitForWall(page);
  await h.clickInWall(page, '[data-a=dismiss]');
  await h.waitForWall(page, false);
  await page.reload();
  assert.deepEqual(await page.evaluate(() => window.Postern.check()), { blocked: true, blockerType: 'network' });
  assert.equal(await h.wallOpen(page), false, 'a dismissed soft wall stays away for the session');
  const events = await expectEvents(site.siteId, ['pageview', 'adblock_detected', 'wall_displayed', 'wall_dismissed', 'pageview']);
  assert.ok(events.find((e) => e.event_type === 'wall_dismissed').metadata.variant, 'wall_dismissed names the variant');
  page.assertClean();
});

test('a soft wall: Escape dismisses it once allowed; Tab stays inside the dialog', async (t) => {
  const site = await newSite('keyboard', { ...wallDefaults, dismiss_after_seconds: 1, variants });
  const page = await h.openPage(browser, site.url, t, { block: h.blockBaitRequest });
  await page.evaluate(() => window.Postern.check());
  await h.waitForWall(page);
  await page.keyboard.press('Escape');
  assert.equal(await h.wallOpen(page), true, 'not dismissible before its delay');
  for (let i = 0; i < 7; i++) {
    await page.keyboard.press(i % 2 ? 'Shift+Tab' : 'Tab');
    assert.equal(await page.evaluate(() => document.activeElement?.hasAttribute('data-postern-wall')), true, 'focus stays in the wall');
  }
  assert.equal(await page.evaluate(() => getComputedStyle(document.documentElement).overflow), 'hidden', 'scrolling is locked');
  await h.eventually(() => h.inWall(page, function () { return !this.querySelector('[data-a=dismiss]').hidden; }));
  await page.keyboard.press('Escape');
  await h.waitForWall(page, false);
  assert.notEqual(await page.evaluate(() => getComputedStyle(document.documentElement).overflow), 'hidden', 'scrolling is back');
  await expectEvents(site.siteId, ['pageview', 'adblock_detected', 'wall_displayed', 'wall_dismissed']);
  page.assertClean();
});

test('a hard wall has no way out but allowing; help and the subscribe link are recorded', async (t) => {
  const site = await newSite('hard', { kind: 'hard', variants: [variants[2]] });
  const page = await h.openPage(browser, site.url, t, { block: h.blockBaitRequest });
  await page.evaluate(() => window.Postern.check());
  await h.waitForWall(page);
  assert.equal(await h.inWall(page, function () { return !!this.querySelector('[data-a=dismiss]'); }), false);
  await h.clickInWall(page, '[data-a=help]');
  assert.equal(await h.inWall(page, function () { return this.querySelector('#h').hidden; }), false, 'instructions open');
  await h.clickInWall(page, '[data-a=help]');
  await h.clickInWall(page, '[data-a=help]');
  await Promise.all([page.waitForURL(`${publisher.origin}/subscribe`), h.clickInWall(page, '[data-a=subscribe]')]);
  await expectEvents(site.siteId, ['pageview', 'adblock_detected', 'wall_displayed', 'wall_help_opened', 'conversion_subscribe']);
  const m = await postern.dashboard(site.siteId);
  assert.deepEqual([m.walls_displayed, m.conversions], [1, 1]);
});

test('forceDisplay and hide from the console', async (t) => {
  const site = await newSite('force', { ...wallDefaults, variants });
  const page = await h.openPage(browser, site.url, t);
  assert.deepEqual(await page.evaluate(() => window.Postern.check()), { blocked: false, blockerType: null });
  await page.evaluate(() => window.Postern.forceDisplay());
  await h.waitForWall(page);
  await page.evaluate(() => window.Postern.hide());
  await h.waitForWall(page, false);
  const events = await expectEvents(site.siteId, ['pageview', 'wall_displayed']);
  assert.equal(events.find((e) => e.event_type === 'wall_displayed').metadata.debug, true, 'a forced wall is marked debug');
  page.assertClean();
});

test('the variant is stable across reloads; ?postern_variant forces one', async (t) => {
  const site = await newSite('variant', { ...wallDefaults, variants });
  const page = await h.openPage(browser, site.url, t, { block: h.blockBaitRequest });
  const titles = [];
  for (let i = 0; i < 3; i++) {
    if (i) await page.reload();
    await page.evaluate(() => window.Postern.check());
    await h.waitForWall(page);
    titles.push(await h.inWall(page, function () { return this.querySelector('h2').textContent; }));
  }
  assert.equal(new Set(titles).size, 1, `one variant across reloads: ${titles}`);
  const events = await expectEvents(site.siteId, ['pageview', 'adblock_detected', 'wall_displayed', 'pageview', 'pageview']);
  assert.equal(titles[0], variants.find((v) => v.name === events.find((e) => e.event_type === 'wall_displayed').metadata.variant).title);

  const forced = await h.openPage(browser, `${site.url}?postern_variant=offer`, t, { block: h.blockBaitRequest });
  await forced.evaluate(() => window.Postern.check());
  await h.waitForWall(forced);
  assert.equal(await h.inWall(forced, function () { return this.querySelector('h2').textContent; }), 'Offer title');
  const all = await h.eventually(async () => {
    const ev = (await postern.events(site.siteId)).filter((e) => e.event_type === 'wall_displayed');
    return ev.length === 2 && ev;
  });
  assert.equal(all[1].metadata.variant, 'offer');
  assert.equal(all[1].metadata.forced_variant, true);
});

test('readable at 375 px: the dialog fits the screen', async (t) => {
  const site = await newSite('mobile', { ...wallDefaults, variants });
  const page = await h.openPage(browser, site.url, t, { viewport: { width: 375, height: 667 }, block: h.blockBaitRequest });
  await page.evaluate(() => window.Postern.check());
  await h.waitForWall(page);
  await h.screenshot(page, 'wall-375px');
  const box = await h.inWall(page, function () {
    const r = this.querySelector('.d').getBoundingClientRect();
    const b = this.querySelector('[data-a=recheck]').getBoundingClientRect();
    return { left: r.left, right: r.right, button: b.right, font: parseFloat(getComputedStyle(this.querySelector('p')).fontSize) };
  });
  assert.ok(box.left >= 0 && box.right <= 375 && box.button <= 375, JSON.stringify(box));
  assert.ok(box.font >= 16, `body text at least 16px: ${box.font}`);
  page.assertClean();
});

test('a session ends after 30 minutes of inactivity: a new id, two sessions counted', async (t) => {
  // Playwright's clock (setFixedTime) moves the page's Date.now: the SDK keeps
  // the time of the last activity in localStorage and compares it with Date.now
  // at the next page load. Timers keep running, so detection still completes.
  const site = await newSite('renewal');
  const page = await h.openPage(browser, null, t);
  const t0 = Date.parse('2026-11-21T09:00:00Z');
  const at = async (ms) => {
    await page.clock.setFixedTime(t0 + ms);
    if (page.url() === 'about:blank') await page.goto(site.url); else await page.reload();
    assert.equal(await page.evaluate(() => Date.now()), t0 + ms, 'the page sees the moved clock');
    assert.deepEqual(await page.evaluate(() => window.Postern.check()), { blocked: false, blockerType: null });
    return page.evaluate(() => window.Postern.getSessionId());
  };
  const first = await at(0);
  const min = 60 * 1000;
  assert.equal(await at(29 * min), first, 'a page view 29 minutes later continues the session');
  // 29 + 29 minutes: each page view counts as activity, so still the same session.
  assert.equal(await at(58 * min), first, 'and so does one 29 minutes after that');
  const second = await at(58 * min + 30 * min + 1000);
  assert.notEqual(second, first, 'after 30 minutes without activity a new session starts');
  assert.equal(await at(58 * min + 30 * min + 2000), second);
  const events = await expectEvents(site.siteId, ['pageview', 'pageview', 'pageview', 'pageview', 'pageview']);
  assert.deepEqual(events.map((e) => e.session_id), [first, first, first, second, second]);
  const m = await postern.dashboard(site.siteId);
  assert.equal(m.sessions, 2, 'the collector counts two sessions');
  page.assertClean();
});

/** The wall's colours as the browser computed them inside the closed shadow root. */
async function wallColors(page) {
  return h.inWall(page, function () {
    const style = (sel) => getComputedStyle(this.querySelector(sel));
    return {
      background: style('.d').backgroundColor,
      text: style('h2').color,
      accent: style('[data-a=recheck]').backgroundColor,
      secondary: style('[data-a=help]').backgroundColor,
    };
  });
}

test("the wall takes the site's colours; anything but #rrggbb gives the defaults", async (t) => {
  const colors = { background: '#fff8e1', text: '#2B2B2B', accent: '#8a1c1c' };
  const site = await newSite('colors', { ...wallDefaults, variants, colors });
  const page = await h.openPage(browser, site.url, t, { block: h.blockBaitRequest });
  await page.evaluate(() => window.Postern.check());
  await h.waitForWall(page);
  await h.screenshot(page, 'wall-colors');
  assert.deepEqual(await wallColors(page), {
    background: 'rgb(255, 248, 225)', text: 'rgb(43, 43, 43)', accent: 'rgb(138, 28, 28)', secondary: 'rgb(255, 248, 225)',
  });
  page.assertClean();

  // Not colours, or CSS that tries to get out of its declaration: ignored, each on its own.
  const bad = { background: 'red', text: '#000;}h2{display:none', accent: 'url(https://example.com/x)' };
  const other = await newSite('colors-bad', { ...wallDefaults, variants, colors: bad });
  const page2 = await h.openPage(browser, other.url, t, { block: h.blockBaitRequest });
  await page2.evaluate(() => window.Postern.check());
  await h.waitForWall(page2);
  assert.deepEqual(await wallColors(page2), {
    background: 'rgb(255, 255, 255)', text: 'rgb(26, 26, 26)', accent: 'rgb(11, 87, 208)', secondary: 'rgb(255, 255, 255)',
  });
  const partly = await newSite('colors-partly', { ...wallDefaults, variants, colors: { accent: '#00ff00', text: 12 } });
  const page3 = await h.openPage(browser, partly.url, t, { block: h.blockBaitRequest });
  await page3.evaluate(() => window.Postern.check());
  await h.waitForWall(page3);
  assert.equal((await wallColors(page3)).accent, 'rgb(0, 255, 0)');
  assert.equal((await wallColors(page3)).text, 'rgb(26, 26, 26)');
});

test("the site's texts are shown as text: markup in them creates no element and runs nothing", async (t) => {
  const attack = '<img src=x onerror="window.pwned=1">';
  const site = await newSite('escaped', {
    ...wallDefaults,
    variants: [{
      name: 'control', weight: 1, title: `Title ${attack}`, body: `Body </p><script>window.pwned=2</script>`,
      subscribe_url: '/subscribe?a=1&b="2"', subscribe_text: `Go <b>ad-free</b> ${attack}`,
    }],
  });
  const page = await h.openPage(browser, site.url, t, { block: h.blockBaitRequest });
  await page.evaluate(() => window.Postern.check());
  await h.waitForWall(page);
  const wall = await h.inWall(page, function () {
    return {
      title: this.querySelector('h2').textContent,
      body: this.querySelector('#m').textContent,
      link: this.querySelector('[data-a=subscribe]').textContent,
      href: this.querySelector('[data-a=subscribe]').getAttribute('href'),
      injected: this.querySelectorAll('img, script, b').length,
    };
  });
  assert.deepEqual(wall, {
    title: `Title ${attack}`,
    body: 'Body </p><script>window.pwned=2</script>',
    link: `Go <b>ad-free</b> ${attack}`,
    href: '/subscribe?a=1&b="2"',
    injected: 0,
  });
  // Give an image error handler the time it would need to run.
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(await page.evaluate(() => window.pwned), undefined);
  page.assertClean();
});

test('events that cannot be sent wait in storage, and after the backoff are sent once from a later page', async (t) => {
  const site = await newSite('queue', { ...wallDefaults, variants });
  const events = /\/v1\/e$/;
  const page = await h.openPage(browser, site.url, t, { block: (p) => p.route(events, (r) => r.abort('blockedbyclient')) });
  assert.deepEqual(await page.evaluate(() => window.Postern.check()), { blocked: false, blockerType: null });
  const stored = () => page.evaluate(() => localStorage.getItem('postern:q') || '');
  await h.eventually(async () => /"event_type":"pageview"/.test(await stored()));
  assert.deepEqual(await postern.events(site.siteId), [], 'nothing reached the collector');
  // `~NEXT BACKOFF`, then `QUEUED_AT BODY` per event.
  const [head, line] = (await stored()).split('\n');
  const [next, backoff] = head.slice(1).split(' ').map(Number);
  assert.equal(backoff, 30000, 'the first wait is 30 s');
  assert.ok(next > Date.now() + 20000 && next <= Date.now() + 30000, `resend not before ${next}`);
  const queued = JSON.parse(line.slice(line.indexOf(' ') + 1));

  // Back online, but within the wait: the next page sends its own pageview only.
  await page.unroute(events);
  await page.reload();
  await page.evaluate(() => window.Postern.check());
  let got = await expectEvents(site.siteId, ['pageview']);
  assert.notEqual(got[0].event_id, queued.event_id, 'the queued event waits');
  assert.match(await stored(), /"event_type":"pageview"/);

  // Once the wait is over (its end moved to the past), the next page resends it.
  await page.evaluate(() => localStorage.setItem('postern:q', localStorage.getItem('postern:q').replace(/^~\d+/, '~0')));
  await page.reload();
  await page.evaluate(() => window.Postern.check());
  got = await expectEvents(site.siteId, ['pageview', 'pageview', 'pageview']);
  assert.equal(got.filter((e) => e.event_id === queued.event_id).length, 1, 'the queued event arrived once with its own event_id');
  assert.doesNotMatch(await stored(), /event_type/, 'the queue is emptied');
  page.assertClean();
});

test('the wall is a labelled modal dialog whose help button says whether the steps are open', async (t) => {
  const site = await newSite('dialog', { ...wallDefaults, variants });
  const page = await h.openPage(browser, site.url, t, { block: h.blockBaitRequest });
  await page.evaluate(() => window.Postern.check());
  await h.waitForWall(page);
  const state = () => h.inWall(page, function () {
    const d = this.querySelector('[role=dialog]');
    const help = this.querySelector('[data-a=help]');
    return {
      modal: d.getAttribute('aria-modal'),
      label: this.getElementById(d.getAttribute('aria-labelledby')).textContent,
      expanded: help.getAttribute('aria-expanded'),
      stepsHidden: this.getElementById(help.getAttribute('aria-controls')).hasAttribute('hidden'),
      focused: this.activeElement && this.activeElement.dataset.a,
    };
  });
  const title = (await h.inWall(page, function () { return this.querySelector('h2').textContent; }));
  assert.deepEqual(await state(), { modal: 'true', label: title, expanded: 'false', stepsHidden: true, focused: 'recheck' });
  await h.clickInWall(page, '[data-a=help]');
  const open = await state();
  assert.deepEqual([open.expanded, open.stepsHidden], ['true', false]);
  await h.clickInWall(page, '[data-a=help]');
  const closed = await state();
  assert.deepEqual([closed.expanded, closed.stepsHidden], ['false', true]);
  page.assertClean();
});

// Brave's own blocking (Shields), as far as it can be tried without Brave:
// Chromium with Brave's `navigator.brave`, Shields blocking the bait request
// or, shields down, blocking nothing. Brave's filtering itself uses the
// EasyList-based lists tests/filter-lists checks.
async function asBrave(page) {
  await page.addInitScript(() => {
    Object.defineProperty(Navigator.prototype, 'brave', { value: { isBrave: () => Promise.resolve(true) }, configurable: true });
  });
}

test('Brave with Shields up: blocked by the browser, the wall explains Shields', async (t) => {
  const site = await newSite('brave-shields-up', { ...wallDefaults, variants });
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
  const events = await expectEvents(site.siteId, ['pageview', 'adblock_detected', 'wall_displayed']);
  assert.equal(events.find((e) => e.event_type === 'adblock_detected').metadata.blocker_type, 'browser');
  page.assertClean();
});

test('Brave with Shields down: clean, no wall', async (t) => {
  const site = await newSite('brave-shields-down', { ...wallDefaults, variants });
  const page = await h.openPage(browser, site.url, t, { block: asBrave });
  assert.deepEqual(await page.evaluate(() => window.Postern.check()), { blocked: false, blockerType: null });
  assert.equal(await h.wallOpen(page), false);
  await expectEvents(site.siteId, ['pageview']);
  page.assertClean();
});

/** The URLs of the collector a page requested. */
function collectorRequests(page) {
  const urls = [];
  page.on('request', (r) => { if (r.url().startsWith(postern.url)) urls.push(new URL(r.url()).pathname); });
  return urls;
}

test('the wall module and the site config are fetched only for a wall, and nothing before the load event', async (t) => {
  const site = await newSite('lazy', { ...wallDefaults, variants });
  const clean = await h.openPage(browser, null, t);
  const cleanUrls = collectorRequests(clean);
  await clean.goto(site.url);
  assert.deepEqual(await clean.evaluate(() => window.Postern.check()), { blocked: false, blockerType: null });
  await expectEvents(site.siteId, ['pageview']);
  assert.ok(cleanUrls.some((u) => u.endsWith('.wasm')), `the SDK loaded: ${cleanUrls}`);
  assert.deepEqual(cleanUrls.filter((u) => /\/config$|\/wall-/.test(u)), [], `a visitor without a blocker fetches no config and no wall: ${cleanUrls}`);

  const blocked = await h.openPage(browser, null, t, { block: h.blockBaitRequest });
  const blockedUrls = collectorRequests(blocked);
  await blocked.goto(site.url);
  await blocked.evaluate(() => window.Postern.check());
  await h.waitForWall(blocked);
  assert.equal(blockedUrls.filter((u) => u.endsWith('/config')).length, 1, `one config request: ${blockedUrls}`);
  assert.equal(blockedUrls.filter((u) => /^\/p\/wall-[0-9a-f]{8}\.js$/.test(u)).length, 1, `one wall module: ${blockedUrls}`);

  // Resource Timing (the collector sends Timing-Allow-Origin): everything the
  // SDK fetches starts once the page has loaded; only the loader, an async
  // script of the page, is fetched with the page.
  for (const page of [clean, blocked]) {
    const timing = await page.evaluate((origin) => ({
      load: performance.getEntriesByType('navigation')[0].loadEventStart,
      entries: performance.getEntriesByType('resource').filter((e) => e.name.startsWith(origin)).map((e) => ({ path: new URL(e.name).pathname, start: e.startTime })),
    }), postern.url);
    const early = timing.entries.filter((e) => e.path !== '/p/v1.js' && e.start < timing.load);
    assert.ok(timing.load > 0 && timing.entries.length >= 3, JSON.stringify(timing));
    assert.deepEqual(early, [], `fetched before the load event at ${timing.load} ms`);
  }
  clean.assertClean();
  blocked.assertClean();
});

/** An article page whose <head> carries `meta` (e.g. a CSP). */
function pageWith(meta, siteId, title) {
  return h.articlePage(postern.url, siteId, title).replace('<meta charset="utf-8">', `<meta charset="utf-8">${meta}`);
}

test("under a page CSP of style-src 'self' the wall is styled, and only then is scrolling locked", async (t) => {
  const site = await newSite('csp-style', { ...wallDefaults, variants });
  pages['/csp-style'] = pageWith(`<meta http-equiv="Content-Security-Policy" content="style-src 'self'">`, site.siteId, 'CSP');
  const page = await h.openPage(browser, site.url, t);
  await page.evaluate(() => window.Postern.forceDisplay());
  await h.waitForWall(page);
  await h.screenshot(page, 'wall-csp-style');
  const look = await h.inWall(page, function () {
    const s = (sel) => getComputedStyle(this.querySelector(sel));
    const box = this.querySelector('.d').getBoundingClientRect();
    return { overlay: s('.o').position, background: s('.d').backgroundColor, radius: s('.d').borderTopLeftRadius, button: s('[data-a=recheck]').backgroundColor, centred: box.left > 0 && box.top > 0 };
  });
  assert.deepEqual(look, { overlay: 'fixed', background: 'rgb(255, 255, 255)', radius: '12px', button: 'rgb(11, 87, 208)', centred: true });
  assert.equal(await page.evaluate(() => document.documentElement.style.overflow), 'hidden', 'a laid-out modal wall locks scrolling');
  await page.evaluate(() => window.Postern.hide());
  await h.waitForWall(page, false);
  assert.equal(await page.evaluate(() => document.documentElement.style.overflow), '', 'and gives it back');
  assert.deepEqual(page.problems.filter((p) => p.startsWith('page error')), [], 'no uncaught error');
});

test("under Trusted Types (require-trusted-types-for 'script') the wall shows without an error", async (t) => {
  const site = await newSite('trusted-types', { ...wallDefaults, variants });
  pages['/trusted-types'] = pageWith(`<meta http-equiv="Content-Security-Policy" content="require-trusted-types-for 'script'">`, site.siteId, 'TT');
  const page = await h.openPage(browser, site.url, t);
  await page.evaluate(() => window.Postern.forceDisplay());
  await h.waitForWall(page);
  const title = await h.inWall(page, function () { return this.querySelector('h2').textContent; });
  assert.ok(variants.some((v) => v.title === title), `a variant's title: ${title}`);
  assert.equal(await h.inWall(page, function () { return getComputedStyle(this.querySelector('.o')).position; }), 'fixed');
  await h.clickInWall(page, '[data-a=help]');
  assert.equal(await h.inWall(page, function () { return this.querySelector('#h').hidden; }), false, 'the controls work');
  await expectEvents(site.siteId, ['pageview', 'wall_displayed', 'wall_help_opened']);
  page.assertClean();
  // The policy is in force: a markup sink throws on this page (and logs the violation).
  assert.equal(await page.evaluate(() => { try { document.createElement('div').innerHTML = '<b>x</b>'; return 'allowed'; } catch (e) { return e.name; } }), 'TypeError');
});

test('a subscribe link that is not a web link is left out', async (t) => {
  for (const [name, url] of [['link-script', 'javascript:window.pwned=3'], ['link-protocol-relative', '//evil.example/plans']]) {
    const site = await newSite(name, { ...wallDefaults, subscribe_url: url, variants: [{ name: 'control', weight: 1, title: 'T', body: 'B', subscribe_url: url }] });
    const page = await h.openPage(browser, site.url, t, { block: h.blockBaitRequest });
    await page.evaluate(() => window.Postern.check());
    await h.waitForWall(page);
    assert.equal(await h.inWall(page, function () { return this.querySelectorAll('a').length; }), 0, url);
    page.assertClean();
  }
});
