// A prerendered page (Speculation Rules) runs no detection and sends nothing
// until it is shown: in real headless Chromium, the SDK of an article that is
// prerendered and not yet activated asks the collector for no probe and sends
// no event; once the visitor navigates to it, the pageview and the probes
// come, all after the activation; and the same page loaded normally sends its
// pageview at once (so a silent SDK is not mistaken for a waiting one).
//
// Chromium refuses to prerender while a DevTools session holds the page
// (PrerenderingDisabledByDevTools under Playwright), so Chromium runs without
// DevTools: the pages drive themselves and everything is watched from the
// servers, the publisher's and a recording proxy in front of the collector,
// and from what the article's own script reports to the publisher.
'use strict';

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const h = require('./harness');

let postern;
let collector;
let publisher;
const pages = {
  // The article's script reports what it sees here (the query is the report).
  '/obs': { type: 'text/plain', body: '' },
};

before(async () => {
  postern = await h.startPostern({ site: false });
  collector = await h.startRecordingProxy(postern.url);
  publisher = await h.startPublisher(pages);
});

after(async () => {
  await publisher?.stop();
  await collector?.stop();
  await postern?.stop();
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** The SDK's article page with a script telling the publisher what the page
 *  lives through: whether it is prerendering, its activation, the SDK loaded,
 *  and every request to the collector with its start (page time). */
function watchedArticle(siteId, title) {
  const watcher = `<script>(() => {
  const nav = performance.getEntriesByType('navigation')[0];
  const tell = (what) => fetch('/obs?' + new URLSearchParams({ page: location.pathname, ...what, prerendering: document.prerendering }));
  tell({ at: 'start' });
  document.addEventListener('prerenderingchange', () => tell({ at: 'activated', activationStart: nav.activationStart }));
  const poll = setInterval(() => { if (window.Postern && Postern.loaded) { clearInterval(poll); tell({ at: 'sdk loaded' }); } }, 20);
  new PerformanceObserver((list) => list.getEntries().forEach((e) => e.name.startsWith(${JSON.stringify(collector.url)})
    && tell({ at: 'request', path: new URL(e.name).pathname, startTime: e.startTime }))).observe({ type: 'resource', buffered: true });
})();</script>`;
  return h.articlePage(collector.url, siteId, title).replace('</head>', `${watcher}</head>`);
}

/** What the article at `page` reported, in the order it arrived. */
const reports = (page) => publisher.requests
  .filter((r) => r.url.startsWith('/obs?'))
  .map((r) => Object.fromEntries(new URL(r.url, 'http://x').searchParams))
  .filter((o) => o.page === page);

// The SDK's detection (the bait and control requests) and its events.
const isProbe = (path) => path.startsWith('/ads/') || path === '/p/echo.js';
const isEvent = (path) => path === '/v1/e';
const probesAndEvents = (requests) => requests.filter((r) => isProbe(r.path) || isEvent(r.path));
const named = (requests) => requests.map((r) => `${r.method} ${r.path}`);

const types = async (siteId) => (await postern.events(siteId)).map((e) => e.event_type);

test('loaded normally, the article sends its pageview and probes at once', async (t) => {
  const siteId = await postern.createSite();
  pages['/plain/article'] = watchedArticle(siteId, 'Plain');
  const browser = h.launchBareChromium(`${publisher.origin}/plain/article`);
  t.after(() => browser.close());
  await h.eventually(async () => (await types(siteId)).includes('pageview'));
  const start = await h.eventually(() => reports('/plain/article').find((o) => o.at === 'start'));
  assert.equal(start.prerendering, 'false', 'an ordinary load');
  await h.eventually(() => collector.requests.some((r) => isProbe(r.path)));
});

test('prerendered, the SDK waits for the activation, then runs', async (t) => {
  const siteId = await postern.createSite();
  pages['/prerender/article'] = watchedArticle(siteId, 'Prerendered');
  // The visitor's current page prerenders the article, and follows the link
  // to it once the test serves /prerender/go.
  pages['/prerender/start'] = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Front page</title>
<script type="speculationrules">{"prerender":[{"source":"list","urls":["/prerender/article"]}]}</script></head>
<body><a href="/prerender/article">An article</a><script>
const poll = setInterval(() => fetch('/prerender/go').then((r) => {
  if (r.ok) { clearInterval(poll); location.href = '/prerender/article'; }
}), 50);
</script></body></html>`;
  const seenBefore = collector.requests.length;
  const ofThisTest = () => collector.requests.slice(seenBefore);
  const browser = h.launchBareChromium(`${publisher.origin}/prerender/start`);
  t.after(() => browser.close());

  // 1. The article is prerendering, for real: Chromium asked for it as a
  //    prerender, the page sees itself prerendering, and the SDK loaded in it.
  const asked = await h.eventually(() => publisher.requests.find((r) => r.url === '/prerender/article'));
  assert.equal(asked.headers['sec-purpose'], 'prefetch;prerender');
  const start = await h.eventually(() => reports('/prerender/article').find((o) => o.at === 'start'));
  assert.equal(start.prerendering, 'true');
  const loaded = await h.eventually(() => reports('/prerender/article').find((o) => o.at === 'sdk loaded'));
  assert.equal(loaded.prerendering, 'true', 'the SDK loaded while the page was prerendering');
  const sdkFiles = ofThisTest().filter((r) => r.path.startsWith('/p/postern-'));
  assert.equal(sdkFiles.length, 2, 'the glue and the wasm');
  for (const r of sdkFiles) assert.equal(r.headers['sec-purpose'], 'prefetch;prerender', `${r.path} fetched by the prerender`);
  // An SDK that did not wait would send the pageview at once and probe
  // within requestIdleCallback's 2 s timeout.
  await sleep(2500);
  assert.deepEqual(named(probesAndEvents(ofThisTest())), [], 'nothing asked or sent while prerendering');
  assert.deepEqual(await types(siteId), []);
  assert.ok(!reports('/prerender/article').some((o) => o.at === 'activated'), 'still not activated');

  // 2. The visitor follows the link: the prerendered page is shown, and only then runs.
  const goAt = Date.now();
  pages['/prerender/go'] = { type: 'text/plain', body: 'go' };
  await h.eventually(async () => (await types(siteId)).includes('pageview'));
  await h.eventually(() => ofThisTest().some((r) => isProbe(r.path)));
  const activated = await h.eventually(() => reports('/prerender/article').find((o) => o.at === 'activated'));
  const activationStart = Number(activated.activationStart);
  assert.ok(activationStart > 0, `activated from the prerender (activationStart ${activationStart})`);
  assert.equal(publisher.requests.filter((r) => r.url === '/prerender/article').length, 1, 'the article was not loaded again');
  const sent = probesAndEvents(ofThisTest());
  for (const r of sent) {
    assert.ok(r.at >= goAt, `${r.method} ${r.path} reached the collector ${goAt - r.at} ms before the navigation`);
    assert.equal(r.headers['sec-purpose'], undefined, `${r.path} sent by the shown page`);
  }
  // The page's own clock says the same: every probe and event started after activationStart.
  const started = await h.eventually(() => {
    const seen = reports('/prerender/article').filter((o) => o.at === 'request' && (isProbe(o.path) || isEvent(o.path)));
    return seen.length >= sent.length && seen;
  });
  for (const o of started) assert.ok(Number(o.startTime) >= activationStart, `${o.path} started at ${o.startTime}, before ${activationStart}`);
  await sleep(300);
  assert.deepEqual(await types(siteId), ['pageview'], 'one pageview: the shown page');
});
