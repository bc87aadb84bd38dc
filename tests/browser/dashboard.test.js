// The dashboard as a new self-hoster meets it: the first user made with
// `postern admin create-user` (README), signing in (a wrong password, then
// throttling), the empty sites list, adding a site through the form (its
// validation errors next to the fields), and signing out.
'use strict';

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const h = require('./harness');
const d = require('./dashboard');

let postern;
let browser;
let owner;

before(async () => {
  postern = await h.startPostern({ site: false });
  browser = await h.launchBrowser();
  owner = d.createUser(postern, { account: 'browser-tests', email: 'owner@example.com', role: 'admin', password: 'correct horse battery' });
});

after(async () => {
  await browser?.close();
  await postern?.stop();
});

test('the login page: a wrong password is refused clearly, the right one lands on the sites list', async (t) => {
  const page = await d.open(browser, `${postern.url}/dashboard/`, t);
  assert.equal(new URL(page.url()).pathname, '/dashboard/login', 'a visitor without a session is sent to the login page');
  await d.checkPage(page, 'login');
  await d.assertTabReaches(page, [page.getByLabel('E-mail address'), page.getByLabel('Password'), page.getByRole('button', { name: 'Sign in' })], 'login');

  await page.getByLabel('E-mail address').fill(owner.email);
  await page.getByLabel('Password').fill('not the password');
  await d.submit(page, page.getByRole('button', { name: 'Sign in' }), 401);
  assert.equal(new URL(page.url()).pathname, '/dashboard/login');
  await assert.doesNotReject(page.getByRole('alert').filter({ hasText: 'Wrong e-mail address or password.' }).waitFor());
  assert.equal(await page.getByLabel('E-mail address').inputValue(), owner.email, 'the e-mail address is kept');
  assert.equal(await page.getByLabel('Password').inputValue(), '', 'the password is not sent back');
  await d.checkPage(page, 'login-wrong-password');

  await page.getByLabel('Password').fill(owner.password);
  await d.submit(page, page.getByRole('button', { name: 'Sign in' }));
  assert.equal(new URL(page.url()).pathname, '/dashboard/');
  await assert.doesNotReject(page.getByRole('heading', { level: 1, name: 'Sites' }).waitFor());
  await assert.doesNotReject(page.getByText('owner@example.com').waitFor());
  d.clean(page);
});

test('repeated failed sign-ins for one address are throttled, with a message saying so', async (t) => {
  const page = await d.open(browser, `${postern.url}/dashboard/login`, t);
  const attempt = async (status) => {
    await page.getByLabel('E-mail address').fill('nobody@example.com');
    await page.getByLabel('Password').fill('guessing');
    await d.submit(page, page.getByRole('button', { name: 'Sign in' }), status);
  };
  for (let i = 0; i < 5; i++) {
    await attempt(401);
    await assert.doesNotReject(page.getByRole('alert').filter({ hasText: 'Wrong e-mail address or password.' }).waitFor());
  }
  await attempt(429);
  await assert.doesNotReject(page.getByRole('alert').filter({ hasText: /Too many failed sign-ins\. Try again in \d+ minutes\./ }).waitFor());
  assert.equal(await page.getByLabel('E-mail address').inputValue(), 'nobody@example.com', 'the form is shown again, filled in');
  await d.checkPage(page, 'login-throttled');
  // The throttle is per e-mail address: the owner still signs in.
  const owned = await d.signIn(browser, postern, t, owner);
  d.clean(owned);
});

test('the sites list starts empty; a site is added through the form, its errors shown next to the fields', async (t) => {
  const page = await d.signIn(browser, postern, t, owner);
  await assert.doesNotReject(page.getByText('No sites yet.').waitFor());
  await d.checkPage(page, 'sites-empty');
  await d.assertTabReaches(page, [page.getByLabel('Name'), page.getByLabel('Domain'), page.getByRole('button', { name: 'Add site' })], 'sites');

  await page.getByLabel('Name').fill('Morning Post');
  await page.getByLabel('Domain').fill('https://morning.example/news');
  await page.getByLabel('Timezone').fill('Europe/Berlin');
  await d.submit(page, page.getByRole('button', { name: 'Add site' }), 400);
  const domain = page.getByLabel('Domain');
  assert.equal(await domain.getAttribute('aria-invalid'), 'true', 'the wrong field is marked invalid');
  const describedBy = (await domain.getAttribute('aria-describedby')).split(/\s+/);
  const message = page.locator(`#${describedBy[0]}`);
  assert.match(await message.textContent(), /domain/i, 'the domain field is described by its error');
  assert.equal(await page.getByLabel('Name').inputValue(), 'Morning Post', 'what was typed is kept');
  assert.equal(await page.getByLabel('Timezone').inputValue(), 'Europe/Berlin');
  await d.checkPage(page, 'sites-invalid');
  assert.equal((await postern.api('/v1/sites')).sites.length, 0, 'nothing was created');

  await domain.fill('morning.example');
  await page.getByLabel('Timezone').fill('Mars/Olympus');
  await d.submit(page, page.getByRole('button', { name: 'Add site' }), 400);
  assert.equal(await page.getByLabel('Timezone').getAttribute('aria-invalid'), 'true');
  assert.equal(await domain.getAttribute('aria-invalid'), null, 'a corrected field is no longer marked');

  await page.getByLabel('Timezone').fill('Europe/Berlin');
  await d.submit(page, page.getByRole('button', { name: 'Add site' }));
  const sites = (await postern.api('/v1/sites')).sites;
  assert.equal(sites.length, 1);
  assert.deepEqual([sites[0].name, sites[0].domain, sites[0].timezone], ['Morning Post', 'morning.example', 'Europe/Berlin']);
  assert.equal(new URL(page.url()).pathname, `/dashboard/sites/${sites[0].id}`, 'the new site opens');
  await assert.doesNotReject(page.getByRole('heading', { level: 1, name: /Morning Post/ }).waitFor());
  await d.checkPage(page, 'site-new');

  await page.getByRole('link', { name: 'Sites', exact: true }).first().click();
  await assert.doesNotReject(page.getByRole('link', { name: 'Morning Post' }).waitFor());
  await d.checkPage(page, 'sites');
});

test('a site\'s settings: the install snippet is copied, a wrong value is shown at its field, a change is saved, the site deleted', async (t) => {
  const page = await d.signIn(browser, postern, t, owner);
  await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: postern.url });
  const siteId = (await postern.api('/v1/sites')).sites[0].id;
  await page.getByRole('link', { name: 'Morning Post' }).click();
  await d.submit(page, page.getByRole('link', { name: 'Settings', exact: true }));
  assert.equal(new URL(page.url()).pathname, `/dashboard/sites/${siteId}/settings`);
  await d.checkPage(page, 'site-settings');
  await d.assertTabReaches(page, [page.getByRole('button', { name: 'Copy' }), page.getByLabel('Status'), page.getByRole('button', { name: 'Save settings' })], 'site-settings');

  const snippet = await page.getByLabel('Install snippet').inputValue();
  assert.equal(snippet, `<script async src="${postern.url}/p/v1.js" data-site-id="${siteId}"></script>`);
  await page.getByRole('button', { name: 'Copy' }).click();
  await assert.doesNotReject(page.getByRole('button', { name: 'Copied' }).waitFor());
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), snippet);

  const domain = page.getByLabel('Domain');
  await domain.fill('morning.example/news');
  await page.getByLabel('Revenue per 1000 views').fill('3.5');
  await d.submit(page, page.getByRole('button', { name: 'Save settings' }), 400);
  assert.equal(await domain.getAttribute('aria-invalid'), 'true');
  assert.match(await page.locator(`#${(await domain.getAttribute('aria-describedby')).split(' ')[0]}`).textContent(), /domain must be a host name/);
  assert.equal(await page.getByLabel('Revenue per 1000 views').inputValue(), '3.5', 'what was typed is kept');
  assert.equal((await postern.api(`/v1/sites/${siteId}`)).domain, 'morning.example', 'nothing was saved');
  await d.checkPage(page, 'site-settings-invalid');

  await domain.fill('morning.example');
  await page.getByLabel('Status').selectOption('paused');
  await d.submit(page, page.getByRole('button', { name: 'Save settings' }));
  await assert.doesNotReject(page.getByRole('status').filter({ hasText: 'The settings are saved.' }).waitFor());
  const saved = await postern.api(`/v1/sites/${siteId}`);
  assert.equal(saved.status, 'paused');
  assert.equal(saved.revenue_per_1000_pageviews, 3.5);

  await d.submit(page, page.getByRole('button', { name: 'Delete site' }));
  assert.equal(new URL(page.url()).pathname, '/dashboard/');
  await assert.doesNotReject(page.getByText('No sites yet.').waitFor());
  assert.equal((await postern.api('/v1/sites')).sites.length, 0, 'the site is gone');
  d.clean(page);
});

test('signing out ends the session: the old cookie no longer opens a page', async (t) => {
  const page = await d.signIn(browser, postern, t, owner);
  const cookie = (await page.context().cookies()).find((c) => c.name === 'postern_session');
  assert.ok(cookie && cookie.httpOnly, 'the session cookie is HttpOnly');
  assert.equal(cookie.sameSite, 'Lax');
  const withCookie = () => fetch(`${postern.url}/dashboard/`, { headers: { cookie: `postern_session=${cookie.value}` }, redirect: 'manual' });
  assert.equal((await withCookie()).status, 200, 'the cookie opens the dashboard while signed in');

  await d.submit(page, page.getByRole('button', { name: 'Sign out' }));
  assert.equal(new URL(page.url()).pathname, '/dashboard/login');
  await d.go(page, `${postern.url}/dashboard/`);
  assert.equal(new URL(page.url()).pathname, '/dashboard/login', 'the browser is signed out');

  const res = await withCookie();
  assert.equal(res.status, 303, 'the old cookie is refused');
  assert.match(res.headers.get('location'), /^\/dashboard\/login/);
  d.clean(page);
});
