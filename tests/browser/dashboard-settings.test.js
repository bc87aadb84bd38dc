// The dashboard's actions a publisher takes instead of curl, on `serve --demo`:
// Settings → API → Generate API Key (used against the API, then revoked),
// integrations (a Slack-type and a signed custom webhook, each tested against a
// real HTTP receiver, with the delivery log), and downloading each export format.
'use strict';

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const http = require('node:http');
const os = require('node:os');
const path = require('node:path');
const h = require('./harness');
const d = require('./dashboard');

let postern;
let browser;
let api;
let site;
let user;

before(async () => {
  // The test receivers listen on loopback, which webhooks may reach only when allowed.
  postern = await h.startPostern({ demo: true, site: false, args: ['--webhook-allow-cidr', '127.0.0.0/8'] });
  browser = await h.launchBrowser();
  api = d.keyOf(postern, 'demo');
  site = (await api.get('/v1/sites')).body.sites.find((s) => s.name === 'The Daily Courier');
  user = d.createUser(postern, { account: 'demo', email: 'admin@example.com', role: 'admin', password: 'an admin password' });
});

after(async () => {
  await browser?.close();
  await postern?.stop();
});

test('Settings → API → Generate API Key: shown once, works against the API, listed with prefix and last use, revoked', async (t) => {
  const page = await d.signIn(browser, postern, t, user);
  await d.submit(page, page.getByRole('link', { name: 'Settings · API' }));
  assert.equal(new URL(page.url()).pathname, '/dashboard/settings/api');
  await d.checkPage(page, 'keys');
  await d.assertTabReaches(page, [page.getByLabel('Name', { exact: true }), page.getByRole('checkbox', { name: 'read' }), page.getByRole('button', { name: 'Generate API Key' })], 'keys');

  await page.getByLabel('Name', { exact: true }).fill('CI export');
  const keysBefore = (await api.get('/v1/keys')).body.keys.length;
  await d.submit(page, page.getByRole('button', { name: 'Generate API Key' }));
  assert.equal(new URL(page.url()).pathname, '/dashboard/settings/api', 'the form redirects to the keys page');
  await assert.doesNotReject(page.getByText('Copy it now: it is shown only once.').waitFor());
  const secret = await page.getByLabel('New API key', { exact: true }).inputValue();
  assert.match(secret, /^pst_/);
  assert.ok(!page.url().includes(secret), 'the secret is not in the address');
  await d.checkPage(page, 'keys-created');

  // Reloading the page creates no other key and does not show the secret again.
  expectOk(await page.reload());
  assert.equal(await page.getByText('Copy it now: it is shown only once.').count(), 0);
  assert.ok(!(await page.content()).includes(secret), 'a reload does not show the secret again');
  assert.equal((await api.get('/v1/keys')).body.keys.length, keysBefore + 1, 'a reload creates no other key');

  const sites = await d.apiGet(postern.url, secret, '/v1/sites');
  assert.equal(sites.status, 200, 'the new key reads the API');
  assert.deepEqual(sites.body.sites.map((s) => s.id), [site.id]);
  assert.equal((await d.apiGet(postern.url, secret, `/v1/analytics/sites/${site.id}/dashboard?days=7`)).status, 200);

  const row = page.locator('#keys tbody tr').filter({ has: page.getByRole('rowheader', { name: 'CI export' }) });
  const lastUsed = await h.eventually(async () => {
    await d.go(page, `${postern.url}/dashboard/settings/api`);
    const cell = (await row.locator('td').nth(3).textContent()).trim();
    return cell !== 'never' && cell;
  }, { timeout: 30000 });
  assert.match(lastUsed, /^\d{4}-\d\d-\d\d \d\d:\d\d$/, 'the list shows when the key was last used');
  const prefix = (await row.locator('td code').textContent()).replace('…', '');
  assert.ok(prefix.length >= 8 && secret.startsWith(prefix), `the list shows the key's prefix ${prefix}`);
  assert.equal(await row.locator('td').nth(1).textContent(), 'read');
  assert.ok(!(await page.content()).includes(secret), 'the secret is never shown again');
  await d.checkPage(page, 'keys-used');

  await d.submit(page, row.getByRole('button', { name: 'Revoke CI export' }));
  assert.equal((await row.locator('.badge').textContent()).trim(), 'revoked');
  assert.equal(await row.getByRole('button').count(), 0, 'a revoked key has no Revoke button');
  const refused = await d.apiGet(postern.url, secret, '/v1/sites');
  assert.equal(refused.status, 401, 'the revoked key is refused at once');
  assert.equal(refused.body.error.code, 'UNAUTHENTICATED');
  d.clean(page);
});

function expectOk(response) {
  assert.equal(response.status(), 200, `${response.url()} answered ${response.status()}`);
}

/** A real HTTP receiver on loopback that records every request. */
async function startReceiver() {
  const requests = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      requests.push({ method: req.method, path: req.url, headers: req.headers, body });
      res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${server.address().port}`, requests, stop: () => new Promise((r) => server.close(r)) };
}

test('integrations: a Slack-type webhook with chosen alerts and a signed custom webhook, tested, with their delivery log', async (t) => {
  const receiver = await startReceiver();
  t.after(() => receiver.stop());
  const page = await d.signIn(browser, postern, t, user);
  await page.getByRole('link', { name: 'The Daily Courier' }).click();
  await d.submit(page, page.getByRole('link', { name: 'Integrations', exact: true }));
  await assert.doesNotReject(page.getByText('No integrations yet.').waitFor());
  await d.checkPage(page, 'integrations-empty');
  await d.assertTabReaches(page, [page.getByLabel('Kind', { exact: true }), page.getByLabel('Webhook URL (Slack-type or custom)', { exact: true }), page.getByRole('button', { name: 'Add integration' })], 'integrations');

  // Slack-type: only two of the alerts.
  await page.getByLabel('Kind', { exact: true }).selectOption('slack');
  await page.getByLabel('Name', { exact: true }).fill('#growth');
  await page.getByLabel('Webhook URL (Slack-type or custom)', { exact: true }).fill(`${receiver.url}/services/T000/B000/slack-secret-part`);
  for (const box of await page.getByRole('checkbox').all()) await box.uncheck();
  await page.getByRole('checkbox', { name: 'ab_test_winner' }).check();
  await page.getByRole('checkbox', { name: 'no_data' }).check();
  await d.submit(page, page.getByRole('button', { name: 'Add integration' }));
  await assert.doesNotReject(page.getByRole('heading', { name: 'Integration “#growth” added' }).waitFor());
  const slack = page.locator('section').filter({ has: page.getByRole('heading', { level: 2, name: /^#growth/ }) });
  assert.equal(await slack.getByText('Receives:').locator('..').textContent(), 'Receives: ab_test_winner, no_data');
  assert.ok(!(await page.content()).includes('slack-secret-part'), 'the Slack URL is shown masked');

  // Custom webhook: its signing secret is shown once.
  await page.getByLabel('Kind', { exact: true }).selectOption('webhook');
  await page.getByLabel('Name', { exact: true }).fill('CRM');
  await page.getByLabel('Webhook URL (Slack-type or custom)', { exact: true }).fill(`${receiver.url}/postern-hook`);
  await d.submit(page, page.getByRole('button', { name: 'Add integration' }));
  const secret = await page.getByLabel('Signing secret', { exact: true }).inputValue();
  assert.ok(secret.length >= 16, `a signing secret is shown: ${secret}`);
  await d.checkPage(page, 'integrations-created');
  expectOk(await page.reload());
  assert.ok(!(await page.content()).includes(secret), 'a reload does not show the signing secret again');
  assert.ok(!(await page.content()).includes('postern-hook'), 'the webhook URL is shown masked too');
  assert.equal((await api.get(`/v1/sites/${site.id}/integrations`)).body.integrations.length, 2, 'a reload adds no other integration');

  // "Send a test" goes back to the log with the outcome: no reload needed.
  const logRow = (name) => page.locator('section').filter({ has: page.getByRole('heading', { level: 2, name: new RegExp(`^${name}`) }) })
    .locator('table.deliveries tbody tr').first();
  for (const name of ['#growth', 'CRM']) {
    await d.submit(page, page.getByRole('button', { name: `Send a test to ${name}` }));
    const texts = (await logRow(name).locator('td').allTextContents()).map((s) => s.trim());
    assert.deepEqual(texts.slice(1, 4), ['test', 'delivered', '1'], `${name}: the log shows the outcome at once`);
    assert.match(texts[4], /^HTTP 200 in \d+ ms$/);
  }
  assert.ok(!(await page.content()).includes(secret), 'the signing secret is not shown again');

  const hook = await h.eventually(() => receiver.requests.find((r) => r.path === '/postern-hook'), { timeout: 30000 });
  assert.equal(hook.method, 'POST');
  assert.equal(hook.headers['content-type'], 'application/json');
  assert.equal(hook.headers['postern-event'], 'test');
  const expected = crypto.createHmac('sha256', secret).update(`${hook.headers['postern-timestamp']}.${hook.body}`).digest('hex');
  assert.equal(hook.headers['postern-signature'], `v1=${expected}`, 'the body is signed with the secret the page showed');
  const payload = JSON.parse(hook.body);
  assert.equal(payload.event, 'test');
  assert.equal(payload.site_id, site.id);

  const chat = await h.eventually(() => receiver.requests.find((r) => r.path.startsWith('/services/')), { timeout: 30000 });
  assert.match(JSON.parse(chat.body).text, /Postern test message/);
  assert.equal(chat.headers['postern-signature'], undefined, 'a Slack-type webhook is not signed');

  // The delivery log of each shows the attempt and the receiver's answer.
  for (const name of ['#growth', 'CRM']) {
    const section = page.locator('section').filter({ has: page.getByRole('heading', { level: 2, name: new RegExp(`^${name}`) }) });
    const cells = await h.eventually(async () => {
      await d.go(page, `${postern.url}/dashboard/sites/${site.id}/integrations`);
      const row = section.locator('table.deliveries tbody tr').first();
      if (!(await row.count())) return null;
      const texts = (await row.locator('td').allTextContents()).map((s) => s.trim());
      return texts[2] === 'delivered' && texts;
    }, { timeout: 30000 });
    assert.equal(cells[1], 'test');
    assert.equal(cells[3], '1', `${name}: one attempt`);
    assert.match(cells[4], /^HTTP 200 in \d+ ms$/);
  }
  await d.checkPage(page, 'integrations-delivered');
});

const FORMATS = {
  csv: 'CSV (spreadsheets: one row per day, device and country)',
  json: 'JSON (integrations: totals and daily figures)',
  pdf: 'PDF (a document to present or archive)',
  zip: 'ZIP (complete history of the period: every file, plus the raw events)',
};

test('exports: each format downloads through the page with the expected content', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'postern-exports-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const page = await d.signIn(browser, postern, t, user);
  await page.getByRole('link', { name: 'The Daily Courier' }).click();
  await d.submit(page, page.getByRole('link', { name: 'Export', exact: true }));
  await d.checkPage(page, 'export');
  await d.assertTabReaches(page, [page.getByRole('radio', { name: FORMATS.csv }), page.getByLabel('From', { exact: true }), page.getByRole('button', { name: 'Download' })], 'export');
  const start = await page.getByLabel('From', { exact: true }).inputValue();
  const end = await page.getByLabel('To', { exact: true }).inputValue();
  const totals = (await api.get(`/v1/analytics/sites/${site.id}/dashboard?days=30`)).body;
  assert.deepEqual(totals.period, { start, end }, 'the form starts with the last 30 days');

  const download = async (format, setup = async () => {}) => {
    await page.getByRole('radio', { name: FORMATS[format] }).check();
    await setup();
    const [file] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Download' }).click()]);
    assert.equal(await file.failure(), null, `${format}: the download completed`);
    const saved = path.join(dir, file.suggestedFilename());
    await file.saveAs(saved);
    assert.ok(file.suggestedFilename().startsWith(`postern-localhost-${start}-to-${end}`), file.suggestedFilename());
    assert.ok(file.suggestedFilename().endsWith(`.${format}`), file.suggestedFilename());
    return saved;
  };

  const csv = fs.readFileSync(await download('csv'), 'utf8').trimEnd().split('\n');
  assert.equal(csv[0], 'date,sessions,adblock_detected,walls_displayed,conversions,conversion_rate,device,country');
  assert.ok(csv.length > 30, `one row per day, device and country: ${csv.length} lines`);
  const csvSessions = csv.slice(1).reduce((n, line) => n + Number(line.split(',')[1]), 0);
  assert.equal(csvSessions, totals.metrics.sessions, 'the rows add up to the dashboard\'s sessions');

  const mobile = fs.readFileSync(await download('csv', () => page.getByLabel('Device', { exact: true }).selectOption('mobile')), 'utf8').trimEnd().split('\n');
  assert.ok(mobile.length > 1 && mobile.slice(1).every((line) => line.split(',')[6] === 'mobile'), 'the device filter applies');
  await page.getByLabel('Device', { exact: true }).selectOption('');

  const json = JSON.parse(fs.readFileSync(await download('json'), 'utf8'));
  assert.deepEqual(json.period, { start, end });
  assert.equal(json.metrics.sessions, totals.metrics.sessions);
  assert.equal(json.metrics.conversions, totals.metrics.conversions);
  assert.equal(json.daily.length, 30);
  assert.deepEqual(Object.keys(json.daily[0]).sort(), ['conversions', 'date', 'sessions']);

  const pdf = await download('pdf');
  assert.equal(fs.readFileSync(pdf).subarray(0, 5).toString(), '%PDF-');
  const text = execFileSync('pdftotext', [pdf, '-'], { encoding: 'utf8' });
  assert.match(text, /The Daily Courier/);

  const zip = await download('zip');
  const names = execFileSync('python3', ['-c', 'import sys, zipfile\nz = zipfile.ZipFile(sys.argv[1])\nassert z.testzip() is None\nprint("\\n".join(z.namelist()))', zip], { encoding: 'utf8' });
  assert.deepEqual(names.trim().split('\n'), ['metrics.csv', 'metrics.json', 'events.jsonl', 'report-runs.jsonl', 'manifest.json']);
  d.clean(page);
});

test('the demo\'s Reports tab starts with a weekly report and its past runs', async (t) => {
  const page = await d.signIn(browser, postern, t, user);
  await page.getByRole('link', { name: 'The Daily Courier' }).click();
  await d.submit(page, page.getByRole('navigation', { name: 'Site' }).getByRole('link', { name: 'Reports' }));
  await d.submit(page, page.getByRole('link', { name: 'Weekly numbers' }));
  const rows = page.locator('#runs-table tbody tr');
  assert.equal(await rows.count(), 4, 'four weeks of runs');
  for (const text of await rows.allInnerTexts()) assert.match(text, /not sent: part of the demo's seeded history/);
  await d.checkPage(page, 'demo-report');
  await d.submit(page, rows.first().getByRole('link', { name: /^View/ }));
  assert.match(await page.locator('h1').innerText(), /^Weekly numbers — /);
  assert.match(await page.locator('body').innerText(), /Sessions/);
  d.clean(page);
});

test('a test to a receiver slower than the wait: the log says so, then updates itself', async (t) => {
  // Answers only when released: the page is shown while the delivery is still in flight.
  let release;
  const released = new Promise((r) => { release = r; });
  const server = http.createServer((req, res) => {
    req.resume();
    released.then(() => res.writeHead(200, { 'content-type': 'text/plain' }).end('ok'));
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => { release(); return new Promise((r) => server.close(r)); });
  const hook = await fetch(`${postern.url}/v1/sites/${site.id}/integrations`, {
    method: 'POST', headers: { authorization: `Bearer ${api.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ kind: 'slack', name: 'Slow hook', url: `http://127.0.0.1:${server.address().port}/services/slow` }),
  });
  assert.equal(hook.status, 201);

  const page = await d.signIn(browser, postern, t, user);
  await d.go(page, `${postern.url}/dashboard/sites/${site.id}/integrations`);
  await d.submit(page, page.getByRole('button', { name: 'Send a test to Slow hook' }));
  const section = page.locator('section').filter({ has: page.getByRole('heading', { level: 2, name: /^Slow hook/ }) });
  const notice = section.getByRole('status');
  assert.match(await notice.innerText(), /^Not sent yet: the outbox is still working on it\. Refresh/);
  const row = section.locator('table.deliveries tbody tr').first();
  assert.equal((await row.locator('td').nth(2).innerText()).trim(), 'pending');
  await page.evaluate(() => { window.notReloaded = true; });

  // Released at once: the webhook's own timeout (10 s) runs from the send, and
  // the page checks below can take seconds on a busy machine.
  release();
  await notice.filter({ hasText: 'Sent: the log below shows how it went.' }).waitFor({ timeout: 30000 });
  const texts = (await row.locator('td').allTextContents()).map((s) => s.trim());
  assert.deepEqual(texts.slice(1, 4), ['test', 'delivered', '1']);
  assert.match(texts[4], /^HTTP 200 in \d+ ms$/);
  assert.equal(await page.evaluate(() => window.notReloaded), true, 'the page updated itself, without a reload');
  await d.checkPage(page, 'integrations-updated');
  d.clean(page);
});
