// Helpers for the dashboard walks (tests/browser/dashboard*.test.js): users made
// with the documented `postern admin create-user`, signing in through the form,
// and the checks every visited page gets: no console error, one h1, a name for
// every visible form control, WCAG AA text contrast, check boxes and radio
// buttons beside their text, no horizontal scrolling at 1280 and 375 px, and
// whole-page screenshots at both widths.
'use strict';

const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const h = require('./harness');

const ARTIFACTS = path.join(__dirname, 'artifacts');
const BIN = process.env.POSTERN_BIN || path.join(h.ROOT, 'target/debug/postern');
const DESKTOP = { width: 1280, height: 900 };
const PHONE = { width: 375, height: 740 };

/** `postern admin …` on the collector's database (the collector may be running). */
function admin(postern, args, input) {
  return execFileSync(BIN, ['admin', ...args, '--db', postern.db], { encoding: 'utf8', input }).trim();
}

/** A dashboard user, as README's "The first dashboard user" says: password on stdin. */
function createUser(postern, { account, email, role, password }) {
  admin(postern, ['create-user', '--account', account, '--email', email, '--role', role], `${password}\n`);
  return { email, password };
}

/** An API key of `account`, and a fetch that uses it (answers are not checked). */
function keyOf(postern, account) {
  const key = admin(postern, ['create-key', '--account', account]);
  return { key, get: (p) => apiGet(postern.url, key, p) };
}

async function apiGet(url, key, p) {
  const res = await fetch(url + p, { headers: { authorization: `Bearer ${key}` } });
  const text = await res.text();
  return { status: res.status, body: text && res.headers.get('content-type')?.includes('json') ? JSON.parse(text) : text };
}

/** A page in a fresh context at desktop width. Besides the harness's console
 *  checks, it knows which documents answered an error status the test expected
 *  (a refused form, a 403): Chromium logs "Failed to load resource" for those,
 *  and `clean(page)` lets exactly those through. */
async function open(browser, url, t) {
  const page = await h.openPage(browser, null, t, { viewport: DESKTOP });
  const problems = [];
  page.on('console', (m) => {
    if (m.type() === 'error') problems.push({ text: m.text(), url: m.location().url });
  });
  page.on('pageerror', (e) => problems.push({ text: `page error: ${e.message}` }));
  page.expectedErrors = new Set();
  page.walkProblems = problems;
  // Confirmation dialogs (revoke, delete) are answered yes: the test chose to press the button.
  page.on('dialog', (dialog) => dialog.accept());
  if (url) await go(page, url);
  return page;
}

/** Fails if the page logged a console error or threw, other than the error
 *  statuses of documents the test asked for. */
function clean(page) {
  const unexpected = page.walkProblems.filter((p) => {
    const m = p.text.match(/^Failed to load resource: the server responded with a status of (\d+)/);
    return !(m && page.expectedErrors.has(`${m[1]} ${p.url}`));
  });
  if (unexpected.length) throw new Error(`the page logged errors:\n${unexpected.map((p) => `${p.text} (${p.url || ''})`).join('\n')}`);
}

function expectDocument(page, response, status, what) {
  assert.ok(response, `${what}: no document was loaded`);
  assert.equal(response.status(), status, `${what}: ${response.url()} answered ${response.status()}`);
  if (status >= 400) page.expectedErrors.add(`${status} ${response.url()}`);
  return response;
}

/** Opens `url` in the page; its answer must have `status`. */
async function go(page, url, status = 200) {
  return expectDocument(page, await page.goto(url), status, `GET ${url}`);
}

/** Presses a form's button and waits for the next page, whose status must be `status`. */
async function submit(page, button, status = 200) {
  const [response] = await Promise.all([page.waitForNavigation(), button.click()]);
  return expectDocument(page, response, status, `pressing ${button}`);
}

/** A fresh browser context at desktop width, signed in through the login form. */
async function signIn(browser, postern, t, user) {
  const page = await open(browser, `${postern.url}/dashboard/`, t);
  assert.equal(new URL(page.url()).pathname, '/dashboard/login');
  await page.getByLabel('E-mail address').fill(user.email);
  await page.getByLabel('Password').fill(user.password);
  await submit(page, page.getByRole('button', { name: 'Sign in' }));
  assert.equal(new URL(page.url()).pathname, '/dashboard/', `signing in as ${user.email} did not land on the sites list`);
  return page;
}

/** The names of the visible form controls that have no accessible name, as
 *  Chromium's accessibility tree computes it (labels, aria-label, aria-labelledby). */
async function unnamedControls(page) {
  const cdp = await page.context().newCDPSession(page);
  try {
    const { root } = await cdp.send('DOM.getDocument', { depth: 0 });
    const { nodeIds } = await cdp.send('DOM.querySelectorAll', {
      nodeId: root.nodeId, selector: 'input:not([type=hidden]), select, textarea, button',
    });
    const missing = [];
    for (const nodeId of nodeIds) {
      const { nodes } = await cdp.send('Accessibility.getPartialAXTree', { nodeId, fetchRelatives: false });
      const node = nodes[0];
      if (!node || node.ignored) continue;
      if (!node.name || !String(node.name.value || '').trim()) {
        const { outerHTML } = await cdp.send('DOM.getOuterHTML', { nodeId });
        missing.push(outerHTML.slice(0, 160));
      }
    }
    return missing;
  } finally {
    await cdp.detach();
  }
}

/** Check boxes and radio buttons that are not right beside their label's
 *  text, or stretched (a width meant for text fields pushes the text away). */
async function detachedChoices(page) {
  return page.evaluate(() => [...document.querySelectorAll('label > input[type=radio], label > input[type=checkbox]')].flatMap((input) => {
    const text = [...input.parentElement.childNodes].find((n) => n.nodeType === Node.TEXT_NODE && n.textContent.trim());
    const box = input.getBoundingClientRect();
    if (!text || !box.width) return [];
    const range = document.createRange();
    range.selectNodeContents(text);
    // The box is drawn in the middle of the element: a stretched element puts it far from the text too.
    const gap = range.getClientRects()[0].left - box.right;
    const stretched = box.width > 2 * box.height;
    return gap >= 0 && gap <= 16 && !stretched ? [] : [`${text.textContent.trim().slice(0, 40)}: ${Math.round(box.width)} px wide, ${Math.round(gap)} px from its text`];
  }));
}

/** Visible texts whose colour contrast with their background is below WCAG
 *  AA: 4.5:1, or 3:1 for large text (24 px, or 18.66 px bold). Disabled
 *  controls are exempt, as WCAG says; SVG text is the chart's, checked by eye. */
async function lowContrast(page) {
  return page.evaluate(() => {
    const rgba = (c) => {
      const m = c.match(/rgba?\(([^)]+)\)/);
      const [r, g, b, a = 1] = m[1].split(/[ ,/]+/).filter(Boolean).map(Number);
      return { r, g, b, a };
    };
    const lum = ({ r, g, b }) => {
      const ch = (v) => { const s = v / 255; return s <= 0.03928 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4; };
      return 0.2126 * ch(r) + 0.7152 * ch(g) + 0.0722 * ch(b);
    };
    const background = (el) => {
      for (let e = el; e; e = e.parentElement) {
        const bg = rgba(getComputedStyle(e).backgroundColor);
        if (bg.a === 1) return bg;
      }
      return { r: 255, g: 255, b: 255, a: 1 };
    };
    const found = [];
    for (const el of document.querySelectorAll('body *')) {
      if (el.closest('svg') || el.closest(':disabled') || el.matches(':disabled')) continue;
      const own = [...el.childNodes].some((n) => n.nodeType === Node.TEXT_NODE && n.textContent.trim());
      const r = el.getBoundingClientRect();
      if (!own || !r.width || !r.height || el.closest('.visually-hidden')) continue;
      const style = getComputedStyle(el);
      if (style.visibility !== 'visible' || Number(style.opacity) === 0) continue;
      const fg = lum(rgba(style.color));
      const bg = lum(background(el));
      const ratio = (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05);
      const size = parseFloat(style.fontSize);
      const large = size >= 24 || (size >= 18.66 && Number(style.fontWeight) >= 700);
      if (ratio < (large ? 3 : 4.5)) found.push(`${el.tagName.toLowerCase()} "${el.textContent.trim().slice(0, 30)}": ${ratio.toFixed(2)}:1`);
    }
    return found;
  });
}

/** A screenshot of the whole page (the harness's shows the viewport only). */
async function fullScreenshot(page, name) {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true });
}

/** The checks every page of the walk gets, and its two whole-page screenshots
 *  (tests/browser/artifacts/dashboard-<name>-desktop.png and -phone.png). */
async function checkPage(page, name) {
  clean(page);
  assert.equal(await page.locator('h1').count(), 1, `${name}: a page has exactly one h1`);
  assert.deepEqual(await unnamedControls(page), [], `${name}: every visible form control has an accessible name`);
  assert.deepEqual(await lowContrast(page), [], `${name}: text contrast meets WCAG AA`);
  for (const [label, viewport] of [['desktop', DESKTOP], ['phone', PHONE]]) {
    await page.setViewportSize(viewport);
    const width = await page.evaluate(() => document.documentElement.scrollWidth);
    assert.ok(width <= viewport.width, `${name}: the page is ${width} px wide at ${viewport.width} px (horizontal scrolling)`);
    assert.deepEqual(await detachedChoices(page), [], `${name} at ${viewport.width} px: each choice sits beside its text`);
    await fullScreenshot(page, `dashboard-${name}-${label}`);
  }
  await page.setViewportSize(DESKTOP);
  clean(page);
}

/** Presses Tab from the top of the page until every locator in `targets` has
 *  had the focus (each a playwright locator), so keyboard users reach them. */
async function assertTabReaches(page, targets, name) {
  await page.evaluate(() => { document.activeElement?.blur(); window.scrollTo(0, 0); });
  await page.locator('body').focus().catch(() => {});
  const handles = await Promise.all(targets.map(async (l) => {
    assert.equal(await l.count(), 1, `${name}: ${l} matches one element`);
    return l.elementHandle();
  }));
  const reached = new Set();
  for (let i = 0; i < 250 && reached.size < handles.length; i++) {
    await page.keyboard.press('Tab');
    for (let j = 0; j < handles.length; j++) {
      if (await handles[j].evaluate((el) => el === document.activeElement)) reached.add(j);
    }
  }
  const missed = targets.filter((_, j) => !reached.has(j)).map(String);
  assert.deepEqual(missed, [], `${name}: Tab reaches the page's main actions`);
}

module.exports = {
  BIN, DESKTOP, PHONE, admin, createUser, keyOf, apiGet, open, clean, go, submit, signIn, checkPage, assertTabReaches, unnamedControls, detachedChoices, lowContrast,
};
