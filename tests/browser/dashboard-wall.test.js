// The dashboard's wall editor with its live preview: the real SDK, loaded
// from /p/v1.js in a frame of the editor, shows the unsaved draft; saving
// keeps it; nothing the preview does is counted.
'use strict';

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { isDeepStrictEqual } = require('node:util');
const h = require('./harness');
const d = require('./dashboard');

let postern;
let browser;
let user;

before(async () => {
  postern = await h.startPostern();
  // The user joins the account of the harness's key, which owns the site.
  user = d.createUser(postern, { account: 'browser-tests', email: 'editor@example.com', role: 'admin', password: 'correct horse battery' });
  browser = await h.launchBrowser();
});

after(async () => {
  await browser?.close();
  await postern?.stop();
});

/** The preview frame once it shows a wall; `marker` is a text its title must contain. */
async function previewShowing(page, title) {
  return h.eventually(async () => {
    const frame = page.frames().find((f) => /\/wall\/preview\/[0-9a-f]{64}/.test(f.url()));
    if (!frame || !(await frame.evaluate(() => !!document.querySelector('[data-postern-wall]')))) return null;
    const shown = await h.inWall(page, function () { return this.querySelector('h2').textContent; });
    return shown === title ? frame : null;
  }, { timeout: 20000 });
}

/**
 * The preview's wall once `accept` holds for it, else the last state read:
 * the preview reloads after each change of the form, and the frame that
 * showed the right title may be replaced a moment later.
 */
async function settledWall(page, accept) {
  let last;
  await h.eventually(async () => accept((last = await wallState(page))), { timeout: 20000 }).catch(() => {});
  return last;
}

/** Asserts that the preview's wall looks like `expected`, once it has settled. */
async function wallShows(page, expected) {
  assert.deepEqual(await settledWall(page, (s) => isDeepStrictEqual(s, expected)), expected);
}

/** What the preview's wall looks like, read inside its closed shadow root. */
function wallState(page) {
  return h.inWall(page, function () {
    const dialog = this.querySelector('[role=dialog]');
    return {
      title: this.querySelector('h2').textContent,
      body: this.querySelector('#m').textContent,
      banner: this.querySelector('.o').classList.contains('b'),
      modal: dialog.getAttribute('aria-modal'),
      dismissible: !!this.querySelector('[data-a=dismiss]'),
      // The colours as the browser computed them.
      background: getComputedStyle(this.querySelector('.d')).backgroundColor,
      text: getComputedStyle(this.querySelector('h2')).color,
      accent: getComputedStyle(this.querySelector('[data-a=recheck]')).backgroundColor,
    };
  });
}

const DEFAULT_COLORS = { background: 'rgb(255, 255, 255)', text: 'rgb(26, 26, 26)', accent: 'rgb(11, 87, 208)' };

test('the wall editor previews the unsaved wall with the real SDK, then saves it', async (t) => {
  const page = await d.signIn(browser, postern, t, user);
  const editor = `${postern.url}/dashboard/sites/${postern.siteId}/wall`;
  await d.go(page, editor);
  const saved = (await postern.api(`/v1/sites/${postern.siteId}`)).wall;
  const first = saved.variants[0];

  // The saved wall first, as the SDK draws it.
  await previewShowing(page, first.title);
  await wallShows(page, {
    title: first.title, body: first.body, banner: saved.kind === 'banner', modal: String(saved.kind !== 'banner'), dismissible: saved.kind !== 'hard',
    ...DEFAULT_COLORS,
  });
  await expectStatus(page, 'The preview shows the form as it is now');

  // Edits show in the preview before anything is saved, and the typing stays in the editor.
  await page.getByLabel('Kind').selectOption('banner');
  await page.getByLabel('Background colour').fill('#fff8e1');
  await page.getByLabel('Button colour').fill('#8a1c1c');
  const title = page.locator('#v0-title');
  await title.fill('Ads keep the Courier free');
  await previewShowing(page, 'Ads keep the Courier free');
  const edited = {
    title: 'Ads keep the Courier free', body: first.body, banner: true, modal: 'false', dismissible: true,
    background: 'rgb(255, 248, 225)', text: DEFAULT_COLORS.text, accent: 'rgb(138, 28, 28)',
  };
  await wallShows(page, edited);
  assert.equal(await page.evaluate(() => document.activeElement.id), 'v0-title', 'the preview did not take the focus');
  assert.equal((await postern.api(`/v1/sites/${postern.siteId}`)).wall.kind, saved.kind, 'nothing is saved yet');
  await h.screenshot(page, 'dashboard-wall-preview-desktop');

  // Another variant, picked for the preview only.
  const second = saved.variants[1];
  await page.getByLabel('Variant shown').selectOption(second.name);
  await previewShowing(page, second.title);
  assert.equal((await settledWall(page, (s) => s?.banner))?.banner, true, 'the draft kind applies to every variant');

  // A hard wall has no dismiss link.
  await page.getByLabel('Kind').selectOption('hard');
  await h.eventually(async () => {
    const s = await wallState(page);
    return s && s.title === second.title && !s.banner && s.modal === 'true' && !s.dismissible;
  }, { timeout: 20000 });

  // Saved, and still there after a reload.
  await d.submit(page, page.getByRole('button', { name: 'Save wall' }));
  assert.equal(page.url(), `${editor}?saved=1`);
  await page.getByText('The wall is saved').waitFor();
  await d.go(page, editor);
  assert.equal(await page.getByLabel('Kind').inputValue(), 'hard');
  assert.equal(await page.locator('#v0-title').inputValue(), 'Ads keep the Courier free');
  assert.equal(await page.getByLabel('Button colour').inputValue(), '#8a1c1c');
  await page.getByLabel('Variant shown').selectOption(first.name);
  await previewShowing(page, 'Ads keep the Courier free');
  await wallShows(page, { ...edited, banner: false, modal: 'true', dismissible: false });
  const config = await (await fetch(`${postern.url}/v1/sdk/sites/${postern.siteId}/config`)).json();
  assert.equal(config.wall.kind, 'hard');
  assert.equal(config.wall.variants[0].title, 'Ads keep the Courier free');
  assert.deepEqual(config.wall.colors, { background: '#fff8e1', text: '#1a1a1a', accent: '#8a1c1c' });

  // The previews sent events (a pageview each at least) to the sandbox: none was stored.
  assert.deepEqual(await postern.events(postern.siteId), []);
  d.clean(page);
  page.assertClean();
});

test('the wall editor and its preview pass the page checks at desktop and phone width', async (t) => {
  const page = await d.signIn(browser, postern, t, user);
  await d.go(page, `${postern.url}/dashboard/sites/${postern.siteId}/wall`);
  const saved = (await postern.api(`/v1/sites/${postern.siteId}`)).wall;
  await previewShowing(page, saved.variants[0].title);
  // One h1, named controls, whole-page screenshots, no horizontal scrolling at 375 px.
  await d.checkPage(page, 'wall');
  await page.setViewportSize(d.PHONE);
  await previewShowing(page, saved.variants[0].title);
  await page.locator('#preview-frame').scrollIntoViewIfNeeded();
  await h.screenshot(page, 'dashboard-wall-preview-phone');
  page.assertClean();
});

async function expectStatus(page, text) {
  await page.locator('#preview-status', { hasText: text }).waitFor();
}
