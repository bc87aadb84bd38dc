// What leaves the visitor's browser: the event bodies Chromium actually sent
// to the real collector, read from the requests themselves.
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

const QUERY = '?token=s3cret&utm_source=newsletter&email=me%40example.com&utm_campaign=spring#reset=abc';

/** The JSON bodies of the events the page sent. */
function sentEvents(page) {
  const bodies = [];
  page.on('request', (r) => {
    if (r.method() === 'POST' && new URL(r.url()).pathname === '/v1/e') bodies.push(JSON.parse(r.postData()));
  });
  return bodies;
}

async function pageviewOf(page, bodies) {
  await page.evaluate(() => window.Postern.check());
  return h.eventually(() => bodies.find((b) => b.event_type === 'pageview'));
}

test('page_url leaves the browser without its query string and fragment', async (t) => {
  const siteId = await postern.createSite();
  pages['/private'] = h.articlePage(postern.url, siteId, 'private');
  const page = await h.openPage(browser, null, t);
  const bodies = sentEvents(page);
  await page.goto(`${publisher.origin}/private${QUERY}`);
  const pv = await pageviewOf(page, bodies);
  assert.equal(pv.page_url, `${publisher.origin}/private`);
  for (const b of bodies) assert.doesNotMatch(JSON.stringify(b), /s3cret|example\.com|reset=abc|utm_/);
  page.assertClean();
});

test('data-keep-utm on the script tag keeps the utm_* parameters, and only them', async (t) => {
  const siteId = await postern.createSite();
  pages['/utm-tag'] = h.articlePage(postern.url, siteId, 'utm').replace('data-site-id=', 'data-keep-utm data-site-id=');
  const page = await h.openPage(browser, null, t);
  const bodies = sentEvents(page);
  await page.goto(`${publisher.origin}/utm-tag${QUERY}`);
  const pv = await pageviewOf(page, bodies);
  assert.equal(pv.page_url, `${publisher.origin}/utm-tag?utm_source=newsletter&utm_campaign=spring`);
  page.assertClean();
});

test('init({keepUtm: true}) keeps the utm_* parameters; init without it does not', async (t) => {
  for (const [keepUtm, expected] of [[true, '?utm_source=newsletter&utm_campaign=spring'], [false, '']]) {
    const siteId = await postern.createSite();
    const name = `/utm-init-${keepUtm}`;
    pages[name] = `<!doctype html><html><head><meta charset="utf-8"><title>init</title>
<script async src="${postern.url}/p/v1.js"></script></head><body><p>An article.</p>
<script>addEventListener('load', () => Postern.init({ siteId: '${siteId}', keepUtm: ${keepUtm} }));</script></body></html>`;
    const page = await h.openPage(browser, null, t);
    const bodies = sentEvents(page);
    await page.goto(`${publisher.origin}${name}${QUERY}`);
    const pv = await pageviewOf(page, bodies);
    assert.equal(pv.page_url, `${publisher.origin}${name}${expected}`, `keepUtm: ${keepUtm}`);
    page.assertClean();
  }
});

test('a page resends at most ten queued events, each once', async (t) => {
  const siteId = await postern.createSite();
  pages['/resend'] = h.articlePage(postern.url, siteId, 'resend');
  pages['/no-sdk'] = '<!doctype html><title>no SDK</title>';
  // Fifteen events an earlier page could not send, queued a minute ago, the backoff over;
  // stored from a page of the site without the SDK.
  const page = await h.openPage(browser, `${publisher.origin}/no-sdk`, t);
  const queued = await page.evaluate(({ site, origin }) => {
    const at = Date.now() - 60000;
    const hex = (n) => Array.from(crypto.getRandomValues(new Uint8Array(n)), (b) => b.toString(16).padStart(2, '0')).join('');
    const ids = [];
    const lines = ['~0 30000'];
    for (let i = 0; i < 15; i++) {
      const id = `${hex(4)}-${hex(2)}-4${hex(2).slice(1)}-a${hex(2).slice(1)}-${hex(6)}`;
      ids.push(id);
      const body = { event_id: id, site_id: site, session_id: 'resend-session-1', event_type: 'wall_help_opened', page_url: `${origin}/resend`, metadata: {} };
      lines.push(`${at + i} ${JSON.stringify(body)}`);
    }
    localStorage.setItem('postern:q', lines.join('\n'));
    return ids;
  }, { site: siteId, origin: publisher.origin });
  const bodies = sentEvents(page);
  await page.goto(`${publisher.origin}/resend`);
  await page.evaluate(() => window.Postern.check());
  await h.eventually(async () => (await postern.events(siteId)).filter((e) => e.event_type === 'wall_help_opened').length >= 10);
  await new Promise((r) => setTimeout(r, 500));
  const resent = bodies.filter((b) => b.event_type === 'wall_help_opened').map((b) => b.event_id);
  assert.deepEqual(resent.slice().sort(), queued.slice(0, 10).sort(), 'the ten oldest, once each');
  const stored = (await postern.events(siteId)).filter((e) => e.event_type === 'wall_help_opened');
  assert.equal(stored.length, 10);
  const left = await page.evaluate(() => localStorage.getItem('postern:q').split('\n').length - 1);
  assert.equal(left, 5, 'the rest wait for a later page');
  page.assertClean();
});
