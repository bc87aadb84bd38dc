// The dashboard's Reports tab walked in real Chromium as an Admin would: sign
// in, create a daily report with a recipient (a refused address first), send
// it now, watch the run reach a real SMTP server (aiosmtpd) in the run history,
// and open the stored run. Every page gets the walks' checks (no console
// error, named controls, contrast, no sideways scrolling at 375 px) and
// whole-page screenshots at 1280 and 375 px.
'use strict';

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync, spawn } = require('node:child_process');
const path = require('node:path');
const readline = require('node:readline');
const h = require('./harness');
const d = require('./dashboard');

const USER = { account: 'browser-tests', email: 'ana@example.com', role: 'admin', password: 'correct horse battery' };

let smtp;
let postern;
let browser;

/** The integration tests' SMTP receiver: one JSON line per accepted message. */
async function startSmtp() {
  execFileSync(path.join(h.ROOT, 'scripts/ensure-test-venv'));
  const python = path.join(h.ROOT, 'target/test-venv/bin/python');
  const child = spawn(python, [path.join(h.ROOT, 'collector/tests/it/smtp_receiver.py')], { stdio: ['pipe', 'pipe', 'inherit'] });
  const messages = [];
  const lines = readline.createInterface({ input: child.stdout });
  const port = await new Promise((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`the SMTP receiver exited with ${code}`)));
    lines.once('line', (first) => resolve(Number(first.replace('listening ', ''))));
  });
  lines.on('line', (l) => messages.push(JSON.parse(l)));
  return { port, messages, stop: () => child.kill() };
}

before(async () => {
  smtp = await startSmtp();
  postern = await h.startPostern({
    args: ['--smtp-host', '127.0.0.1', '--smtp-port', String(smtp.port), '--smtp-tls', 'none', '--smtp-from', 'Postern <reports@postern.test>'],
  });
  d.createUser(postern, USER);
  browser = await h.launchBrowser();
});

after(async () => {
  await browser?.close();
  await postern?.stop();
  smtp?.stop();
});

test('an Admin creates a report, sends it now and opens the run from the history', async (t) => {
  const page = await d.signIn(browser, postern, t, USER);
  await page.getByRole('link', { name: 'Browser test' }).first().click();
  await page.waitForURL(/\/dashboard\/sites\/[0-9a-f-]{36}$/);
  const reportsTab = page.getByRole('navigation', { name: 'Site' }).getByRole('link', { name: 'Reports' });
  await reportsTab.click();
  await page.waitForURL(/\/reports$/);
  assert.equal(await reportsTab.getAttribute('aria-current'), 'page');
  await page.getByText('No reports yet.').waitFor();

  // The form, every control reached through its label; a bad address is refused next to its field.
  await page.getByLabel('Name', { exact: true }).fill('Morning numbers');
  await page.getByLabel('Type', { exact: true }).selectOption('daily');
  await page.getByLabel('Time (HH:MM)').fill('07:45');
  await page.getByLabel('E-mail of recipient 1').fill('ana at example.com');
  await page.getByLabel('Role of recipient 1').selectOption('admin');
  assert.equal(await page.getByLabel('E-mail to the recipients').isChecked(), true, 'e-mail is the default channel');
  await page.getByRole('group', { name: 'Format' }).getByLabel('PDF').check();
  await d.submit(page, page.getByRole('button', { name: 'Create report' }), 400);
  const address = page.getByLabel('E-mail of recipient 1');
  assert.equal(await address.getAttribute('aria-invalid'), 'true');
  assert.equal(await address.inputValue(), 'ana at example.com', 'what was typed is kept');
  assert.match(await page.locator('#recipient_email_0-error').innerText(), /email must be an e-mail address/);
  assert.equal(await page.getByLabel('Name', { exact: true }).inputValue(), 'Morning numbers');
  await d.checkPage(page, 'reports-refused');

  await address.fill(USER.email);
  await page.getByRole('group', { name: 'Format' }).getByLabel('PDF').check();
  // Submitted from the keyboard.
  await page.getByRole('button', { name: 'Create report' }).focus();
  const [created] = await Promise.all([page.waitForNavigation(), page.keyboard.press('Enter')]);
  assert.equal(created.status(), 200);
  assert.match(page.url(), /\/reports\/[0-9a-f-]{36}\?created=1$/);
  await page.getByRole('status').filter({ hasText: 'The report is created.' }).waitFor();
  const reportUrl = page.url().replace('?created=1', '');
  const facts = await page.locator('dl.facts').innerText();
  assert.match(facts, /Every day at 07:45 \(UTC\)/);
  assert.match(facts, /ana@example\.com\s+Admin/);
  assert.match(facts, /PDF/);

  // Send now: the run is stored, listed, and delivered to the real SMTP server.
  await d.submit(page, page.getByRole('button', { name: 'Send now' }));
  await page.getByRole('status').filter({ hasText: 'Sent: the run for' }).waitFor();
  const rows = page.locator('#runs-table tbody tr');
  assert.equal(await rows.count(), 1);
  await h.eventually(async () => {
    await d.go(page, reportUrl);
    return (await rows.first().innerText()).includes('delivered');
  }, { timeout: 30000, interval: 500 });
  assert.match(await rows.first().innerText(), /ana@example\.com \(email\): delivered/);
  assert.equal(smtp.messages.length, 1);
  assert.deepEqual(smtp.messages[0].rcpt_tos, [USER.email]);
  assert.ok(smtp.messages[0].html.includes(new URL(reportUrl).pathname), 'the Admin e-mail links to this page');
  await d.assertTabReaches(page, [
    page.getByRole('button', { name: 'Send now' }),
    rows.first().getByRole('link', { name: /^View/ }),
    page.getByRole('button', { name: 'Save report' }),
  ], 'report');
  await d.checkPage(page, 'report');

  // Open the run from the history: the stored report as HTML, and its PDF.
  await d.submit(page, rows.first().getByRole('link', { name: /^View/ }));
  assert.match(page.url(), /\/runs\/[0-9a-f-]{36}\?format=html$/);
  assert.match(await page.locator('h1').innerText(), /^Morning numbers — \w+ \d+ \w+ \d{4}$/);
  assert.match(await page.locator('body').innerText(), /Sessions/);
  await d.checkPage(page, 'report-run');
  const pdf = await page.request.get(page.url().replace('format=html', 'format=pdf'));
  assert.equal(pdf.headers()['content-type'], 'application/pdf');
  assert.ok((await pdf.body()).subarray(0, 5).equals(Buffer.from('%PDF-')));

  await d.go(page, reportUrl.replace(/\/[0-9a-f-]{36}$/, ''));
  await page.getByRole('link', { name: 'Morning numbers' }).waitFor();
  await d.checkPage(page, 'reports');
});

test('Add recipient and Remove: a report with three recipients in one save', async (t) => {
  const page = await d.signIn(browser, postern, t, USER);
  await page.getByRole('link', { name: 'Browser test' }).first().click();
  await page.waitForURL(/\/dashboard\/sites\/[0-9a-f-]{36}$/);
  await d.submit(page, page.getByRole('navigation', { name: 'Site' }).getByRole('link', { name: 'Reports' }));
  const siteId = new URL(page.url()).pathname.split('/')[3];
  assert.equal(await page.getByText('Need more rows? Save, and the page offers two more.').isVisible(), false, 'the script replaces the no-script hint');

  await page.getByLabel('Name', { exact: true }).fill('Team digest');
  await page.getByLabel('Type', { exact: true }).selectOption('weekly');
  await page.getByLabel('E-mail of recipient 1').fill('ana@example.com');
  await page.getByLabel('Role of recipient 1').selectOption('admin');
  await page.getByLabel('E-mail of recipient 2').fill('bob@example.com');
  await page.getByRole('button', { name: 'Add recipient' }).click();
  assert.equal(await page.getByLabel('E-mail of recipient 3').evaluate((el) => el === document.activeElement), true, 'the new row has the focus');
  await page.getByLabel('E-mail of recipient 3').fill('cleo@example.com');
  await page.getByRole('button', { name: 'Add recipient' }).click();
  await page.getByLabel('E-mail of recipient 4').fill('dan@example.com');
  await page.getByLabel('Role of recipient 4').selectOption('admin');
  await d.checkPage(page, 'reports-recipients');
  await d.assertTabReaches(page, [page.getByRole('button', { name: 'Add recipient' }), page.getByRole('button', { name: 'Remove recipient 4' })], 'recipients');

  // Removing the second row renumbers the others.
  await page.getByRole('button', { name: 'Remove recipient 2' }).click();
  assert.equal(await page.getByLabel(/^E-mail of recipient \d$/).count(), 3);
  assert.equal(await page.getByLabel('E-mail of recipient 2').inputValue(), 'cleo@example.com');
  assert.equal(await page.getByLabel('E-mail of recipient 3').inputValue(), 'dan@example.com');
  assert.equal(await page.getByLabel('Role of recipient 3').inputValue(), 'admin');

  await d.submit(page, page.getByRole('button', { name: 'Create report' }));
  assert.match(page.url(), /\/reports\/[0-9a-f-]{36}\?created=1$/);
  const api = d.keyOf(postern, USER.account);
  const report = (await api.get(`/v1/sites/${siteId}/reports`)).body.reports.find((r) => r.name === 'Team digest');
  assert.deepEqual(report.recipients, [
    { email: 'ana@example.com', role: 'admin' },
    { email: 'cleo@example.com', role: 'reader' },
    { email: 'dan@example.com', role: 'admin' },
  ], 'three recipients in one save, the removed one left out');
  d.clean(page);
});
