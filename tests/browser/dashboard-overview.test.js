// A site's overview page on the five weeks of `serve --demo` data, used as a
// publisher uses it: the period selector and device filter change the KPI
// tiles (to the analytics API's numbers for the same filters), the chart is
// drawn by hour, day and week, the A/B table names the winner, and the recent
// events are filtered and paged.
'use strict';

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const h = require('./harness');
const d = require('./dashboard');

let postern;
let browser;
let api;
let site;
let user;

before(async () => {
  postern = await h.startPostern({ demo: true, site: false });
  browser = await h.launchBrowser();
  api = d.keyOf(postern, 'demo');
  site = (await api.get('/v1/sites')).body.sites.find((s) => s.name === 'The Daily Courier');
  user = d.createUser(postern, { account: 'demo', email: 'editor@example.com', role: 'admin', password: 'an editor password' });
});

after(async () => {
  await browser?.close();
  await postern?.stop();
});

async function openSite(t) {
  const page = await d.signIn(browser, postern, t, user);
  await page.getByRole('link', { name: 'The Daily Courier' }).click();
  await page.waitForURL(`**/dashboard/sites/${site.id}`);
  return page;
}

/** The KPI tiles as numbers. */
async function tiles(page) {
  const read = async (metric) => parseFloat(await page.locator(`[data-metric="${metric}"]`).textContent());
  return {
    sessions: await read('sessions'),
    adblock_detected: await read('adblock_detected'),
    walls_displayed: await read('walls_displayed'),
    conversions: await read('conversions'),
    conversion_rate: await read('conversion_rate'),
  };
}

async function apiMetrics(query) {
  const r = await api.get(`/v1/analytics/sites/${site.id}/dashboard?${query}`);
  assert.equal(r.status, 200);
  const { adblock_share: _, ...m } = r.body.metrics;
  return m;
}

async function choose(page, filters) {
  for (const [label, value] of Object.entries(filters)) await page.getByLabel(label, { exact: true }).selectOption(value);
  await d.submit(page, page.getByRole('button', { name: 'Apply' }));
}

test('the demo user README names signs in and finds the demo site', async (t) => {
  const page = await d.signIn(browser, postern, t, { email: 'demo@postern.local', password: 'postern-demo' });
  await assert.doesNotReject(page.getByRole('link', { name: 'The Daily Courier' }).waitFor());
  assert.equal((await page.locator('.who .badge').textContent()).trim(), 'admin');
  d.clean(page);
});

test('the period selector and device filter change the KPI tiles to the API\'s numbers', async (t) => {
  const page = await openSite(t);
  await d.checkPage(page, 'site-overview');
  await d.assertTabReaches(page, [
    page.getByLabel('Period', { exact: true }), page.getByLabel('Device', { exact: true }), page.getByLabel('Chart by'), page.getByRole('button', { name: 'Apply' }),
    page.getByRole('link', { name: 'Settings', exact: true }),
  ], 'site-overview');
  const week = await tiles(page);
  assert.deepEqual(week, await apiMetrics('days=7'), 'the default period is the last 7 days');
  assert.ok(week.sessions > 1000 && week.conversions > 0, `the demo has traffic: ${JSON.stringify(week)}`);

  await choose(page, { Period: '30', Device: 'mobile' });
  assert.match(page.url(), /days=30/);
  assert.match(page.url(), /device=mobile/);
  const mobile = await tiles(page);
  assert.deepEqual(mobile, await apiMetrics('days=30&device=mobile'));
  assert.match(await page.locator('#period').textContent(), /mobile only/);

  await choose(page, { Device: '' });
  const month = await tiles(page);
  assert.deepEqual(month, await apiMetrics('days=30'));
  assert.ok(month.sessions > mobile.sessions && month.sessions > week.sessions, 'the filters change the numbers');
  assert.equal(await page.getByLabel('Period', { exact: true }).inputValue(), '30', 'the selector shows the chosen period');
  await d.checkPage(page, 'site-overview-30-days');
});

test('the conversions chart draws the API\'s timeline by hour, day and week', async (t) => {
  const page = await openSite(t);
  // Hours over the last 7 days, not today: just after midnight in the site's
  // timezone today has no conversion yet, and the bar heights need some.
  for (const [days, granularity] of [['7', 'hour'], ['30', 'day'], ['90', 'week']]) {
    await choose(page, { Period: days, 'Chart by': granularity });
    const timeline = (await api.get(`/v1/analytics/sites/${site.id}/conversions?days=${days}&granularity=${granularity}`)).body.timeline;
    const chart = page.getByRole('img', { name: `Conversions by ${granularity}` });
    await assert.doesNotReject(chart.waitFor());
    const bars = await chart.locator('rect.bar').evaluateAll((rects) => rects.map((r) => ({
      title: r.querySelector('title').textContent, height: r.getBBox().height, shown: r.getBoundingClientRect().height,
    })));
    assert.equal(bars.length, timeline.length, `${granularity}: one bar per bucket`);
    if (granularity === 'hour') {
      const starts = timeline.map((b) => Date.parse(b.bucket));
      assert.ok(starts.slice(1).every((s, i) => s - starts[i] === 3600e3), 'hour: the buckets are consecutive hours');
      // 7 days of 24 hours, one less or more on a day the clocks change.
      assert.ok(Math.abs(bars.length - 7 * 24) <= 1, `hour: ${bars.length} bars for 7 days`);
    }
    timeline.forEach((b, i) => assert.ok(bars[i].title.startsWith(`${b.bucket}: ${b.conversions} conversions`), `${granularity} bar ${i}: ${bars[i].title}`));
    // Bar heights follow the numbers: the most conversions the tallest, none a flat bar.
    const most = Math.max(...timeline.map((b) => b.conversions));
    assert.ok(most > 0, `${granularity}: the demo has conversions in the period`);
    timeline.forEach((b, i) => {
      const expected = (b.conversions / most) * Math.max(...bars.map((x) => x.height));
      assert.ok(Math.abs(bars[i].height - expected) < 0.05, `${granularity} bar ${i}: height ${bars[i].height}, expected ${expected}`);
    });
    assert.ok(bars.some((b) => b.shown > 20), `${granularity}: the bars are visible on screen`);
    if (timeline.length > 1) assert.equal(await chart.locator('polyline.rate').count(), 1, `${granularity}: the rate line is drawn`);
    const rows = await page.locator('#timeline tbody tr').count();
    assert.equal(rows, timeline.length, `${granularity}: the data table repeats the chart`);
    await d.checkPage(page, `site-chart-${granularity}`);
  }
  // Hours over 90 days would be 2160 bars: the page shows days and says so.
  await choose(page, { Period: '90', 'Chart by': 'hour' });
  await assert.doesNotReject(page.getByText('Hourly buckets are available for periods up to 31 days; showing days.').waitFor());
  assert.equal(await page.locator('svg.chart-svg rect.bar').count(), 90);
  d.clean(page);
});

test('the A/B table shows each variant with its confidence and the API\'s winner', async (t) => {
  const page = await openSite(t);
  await choose(page, { Period: '30' });
  const variants = (await api.get(`/v1/analytics/sites/${site.id}/ab-testing?days=30`)).body.variants;
  const winner = variants.find((v) => v.is_winner);
  assert.ok(winner, `the demo has a winner over 30 days: ${JSON.stringify(variants)}`);
  const table = page.locator('#ab');
  const rows = await table.locator('tbody tr').evaluateAll((trs) => trs.map((tr) => [...tr.children].map((c) => c.textContent.trim())));
  rows.forEach((r) => assert.ok(r[3].endsWith(' %') && r[4].endsWith(' %'), `rate and confidence are percentages: ${r}`));
  const numbers = rows.map(([name, impressions, conversions, rate, confidence, result]) => [
    name, Number(impressions), Number(conversions), parseFloat(rate), parseFloat(confidence), result,
  ]);
  assert.deepEqual(numbers, variants.map((v) => [
    v.name, v.impressions, v.conversions, v.conversion_rate, v.confidence, v.is_winner ? 'Winner' : '—',
  ]));
  assert.equal(await table.locator('tr.winner th').textContent(), winner.name);
  await table.scrollIntoViewIfNeeded();
  await d.checkPage(page, 'site-ab');
});

test('recent events: filtered by type and paged like the events API', async (t) => {
  const page = await openSite(t);
  await page.getByLabel('Event type').selectOption('conversion_allowlist');
  await d.submit(page, page.getByRole('button', { name: 'Filter' }));
  const all = (await api.get(`/v1/events/sites/${site.id}?event_type=conversion_allowlist&limit=50`)).body;
  assert.ok(all.total > 50, `enough conversions for two pages: ${all.total}`);
  const shown = async () => page.locator('#event-list tbody tr').evaluateAll((trs) => trs.map((tr) => ({
    type: tr.children[1].textContent, session: tr.children[2].textContent,
  })));

  let rows = await shown();
  assert.equal(await page.locator('#events-count').textContent(), `Showing 1–25 of ${all.total} events`);
  assert.deepEqual(rows, all.events.slice(0, 25).map((e) => ({ type: 'conversion_allowlist', session: e.session_id })));
  assert.equal(await page.getByRole('link', { name: '← Newer' }).count(), 0, 'no newer page on the first one');
  await d.checkPage(page, 'site-events');

  await d.submit(page, page.getByRole('link', { name: 'Older →' }));
  assert.match(page.url(), /event_type=conversion_allowlist/);
  assert.equal(await page.locator('#events-count').textContent(), `Showing 26–50 of ${all.total} events`);
  rows = await shown();
  assert.deepEqual(rows, all.events.slice(25, 50).map((e) => ({ type: 'conversion_allowlist', session: e.session_id })));

  await d.submit(page, page.getByRole('link', { name: '← Newer' }));
  assert.equal(await page.locator('#events-count').textContent(), `Showing 1–25 of ${all.total} events`);

  await page.getByLabel('Event type').selectOption('');
  await d.submit(page, page.getByRole('button', { name: 'Filter' }));
  // Unfiltered: the API's newest events, whatever their types (which of the
  // demo's sessions come last depends on the time of day it was seeded).
  const newest = (await api.get(`/v1/events/sites/${site.id}?limit=25`)).body;
  assert.equal(await page.locator('#events-count').textContent(), `Showing 1–25 of ${newest.total} events`);
  assert.ok(newest.total > all.total, 'more events than the conversions alone');
  assert.deepEqual(await shown(), newest.events.map((e) => ({ type: e.event_type, session: e.session_id })));
  d.clean(page);
});
