// Real Firefox (Debian's firefox-esr) for the browser tests and the SDK bench,
// driven by puppeteer-core over WebDriver BiDi: playwright-core drives only
// its own patched Firefox builds, puppeteer-core drives the stock one.
//
//   const ff = require('./firefox');
//   const browser = await ff.launchFirefox({ ublock: true });
//   const page = await ff.openPage(browser, url, t);   // a new visitor; fails the test on page errors
//
// Host names: `network.dns.localDomains` resolves the names in HOSTS to the
// loopback address, so pages and the collector are reached by non-loopback
// names (EasyList exempts localhost and 127.0.0.1 from generic hiding).
//
// uBlock Origin: Debian's webext-ublock-origin-firefox installs it, with its
// filter lists, as a system-wide extension, which Firefox loads when the
// profile enables that scope.
'use strict';

const fs = require('node:fs');
const puppeteer = require('puppeteer-core');

const FIREFOX = process.env.FIREFOX || '/usr/bin/firefox-esr';
const UBLOCK = '/usr/share/mozilla/extensions/{ec8030f7-c20a-464f-9b0e-13a3a9e97384}/uBlock0@raymondhill.net';
// The collector's name is neutral, as the README advises (lists act on some).
const HOSTS = ['publisher.test', 'postern.test'];

// AddonManager scopes: profile 1, user 2, application 4, system 8.
const SCOPES_WITHOUT_SYSTEM = 1 | 4;
const ALL_SCOPES = 1 | 2 | 4 | 8;

/** Headless Firefox with a fresh profile; with uBlock Origin when `ublock`. */
async function launchFirefox({ ublock = false, prefs = {} } = {}) {
  if (!fs.existsSync(FIREFOX)) throw new Error(`no Firefox at ${FIREFOX}: apt-get install firefox-esr (scripts/test does)`);
  if (ublock && !fs.existsSync(UBLOCK)) throw new Error(`no uBlock Origin at ${UBLOCK}: apt-get install webext-ublock-origin-firefox (scripts/test does)`);
  return puppeteer.launch({
    browser: 'firefox',
    executablePath: FIREFOX,
    headless: true,
    extraPrefsFirefox: {
      // puppeteer's profile enables the profile and application scopes only.
      'extensions.enabledScopes': ublock ? ALL_SCOPES : SCOPES_WITHOUT_SYSTEM,
      'extensions.autoDisableScopes': 0,
      'network.dns.localDomains': HOSTS.join(','),
      ...prefs,
    },
  });
}

/** `url` (http://127.0.0.1:PORT/…) as reached by one of HOSTS. */
function named(url, host) {
  const u = new URL(url);
  u.hostname = host;
  return u.toString().replace(/\/$/, '');
}

/** A page in a fresh browser context: a new visitor (own storage and cache).
 *  `page.assertClean()` fails the test on uncaught errors or console errors,
 *  except those whose text `expected` accepts (Firefox reports a request a
 *  blocker refused as an error of the page). */
async function openPage(browser, url, { t, expected = () => false } = {}) {
  const context = await browser.createBrowserContext();
  const page = await context.newPage();
  const problems = [];
  const report = (text) => { if (!expected(text)) problems.push(text); };
  page.on('console', (m) => { if (m.type() === 'error') report(`console.error: ${m.text()}`); });
  page.on('pageerror', (e) => report(`page error: ${e.message}`));
  if (t) t.after(() => context.close());
  if (url) await page.goto(url);
  page.assertClean = () => {
    if (problems.length) throw new Error(`the page logged errors:\n${problems.join('\n')}`);
  };
  return page;
}

/** Resolves once uBlock Origin acts on `probeUrl`, a page whose element with
 *  id `id` its lists hide (its lists load asynchronously after start). */
async function waitForUblock(browser, probeUrl, id, timeout = 30000) {
  const page = await openPage(browser);
  try {
    const end = Date.now() + timeout;
    for (;;) {
      await page.goto(probeUrl);
      // Cosmetic filters apply shortly after the document loads.
      const hidden = await page.waitForFunction((i) => document.getElementById(i)?.offsetHeight === 0, { timeout: 2000 }, id).then(() => true, () => false);
      if (hidden) return;
      if (Date.now() > end) throw new Error(`uBlock Origin did not hide #${id} within ${timeout} ms`);
    }
  } finally {
    await page.browserContext().close();
  }
}

module.exports = { FIREFOX, HOSTS, launchFirefox, named, openPage, waitForUblock };
