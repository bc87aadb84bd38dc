// A Reader cannot change anything. An Admin walks every dashboard page and
// records each form that changes something (its action and fields as the
// browser would send them); a Reader of the same account then sees every page
// without a usable change control, and replaying each recorded form with the
// Reader's own session and CSRF token is refused with 403 and changes nothing.
'use strict';

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const h = require('./harness');
const d = require('./dashboard');

let postern;
let browser;
let api;
let site;
let adminUser;
let readerUser;

before(async () => {
  postern = await h.startPostern({ demo: true, site: false });
  browser = await h.launchBrowser();
  api = d.keyOf(postern, 'demo');
  site = (await api.get('/v1/sites')).body.sites.find((s) => s.name === 'The Daily Courier');
  adminUser = d.createUser(postern, { account: 'demo', email: 'admin@example.com', role: 'admin', password: 'an admin password' });
  readerUser = d.createUser(postern, { account: 'demo', email: 'reader@example.com', role: 'reader', password: 'a reader password' });
  // Things with their own change forms: an integration (test, delete) and a report.
  const post = (p, body) => fetch(postern.url + p, {
    method: 'POST', headers: { authorization: `Bearer ${api.key}`, 'content-type': 'application/json' }, body: JSON.stringify(body),
  }).then((r) => assert.equal(r.status, 201, `POST ${p}`));
  await post(`/v1/sites/${site.id}/integrations`, { kind: 'webhook', name: 'CRM', url: 'https://crm.example.com/hook' });
  await post(`/v1/sites/${site.id}/reports`, { type: 'weekly', name: 'Weekly numbers', channels: ['webhook'] });
});

after(async () => {
  await browser?.close();
  await postern?.stop();
});

/** Every dashboard page reachable by links from the sites list, and the
 *  change forms on them (everything posted except signing out). */
async function crawl(page) {
  const pages = [];
  const forms = new Map();
  const queue = ['/dashboard/'];
  const seen = new Set(queue);
  while (queue.length) {
    const p = queue.shift();
    await d.go(page, postern.url + p);
    pages.push(p);
    const found = await page.evaluate(() => ({
      links: [...document.querySelectorAll('a[href^="/dashboard/"]')].map((a) => a.getAttribute('href').split('#')[0]),
      forms: [...document.querySelectorAll('form')].filter((f) => f.method === 'post').map((f) => ({
        action: new URL(f.action).pathname, fields: [...new FormData(f).entries()],
      })),
    }));
    for (const f of found.forms) if (f.action !== '/dashboard/logout' && !forms.has(f.action)) forms.set(f.action, { ...f, page: p });
    for (const l of found.links) {
      // Pages only: no downloads, no period/filter variants of a page already queued.
      if (l.includes('/download') || l.includes('?') || seen.has(l)) continue;
      seen.add(l);
      queue.push(l);
    }
  }
  return { pages, forms: [...forms.values()] };
}

/** Values for the fields an Admin's form left empty, so each replayed form
 *  would change something if the server let it through. */
const FILL = { name: 'Changed by a reader', domain: 'reader.example', url: 'http://127.0.0.1:9/reader', email: 'reader@example.com' };

/** Posts a recorded form as the browser would (URL-encoded, repeated names
 *  kept) with the signed-in user of `page` and its CSRF token. */
function replay(page, form, csrf) {
  const body = new URLSearchParams();
  for (const [k, v] of form.fields) if (k !== 'csrf') body.append(k, v || FILL[k] || v);
  body.append('csrf', csrf);
  return page.request.post(postern.url + form.action, {
    headers: { 'content-type': 'application/x-www-form-urlencoded' }, data: body.toString(), maxRedirects: 0,
  });
}

/** Everything a change could touch, as the API shows it (keys without their
 *  last use, which the snapshot's own requests update). */
async function snapshot() {
  const get = async (p) => {
    const r = await api.get(p);
    assert.equal(r.status, 200, `GET ${p}`);
    return r.body;
  };
  const keys = (await get('/v1/keys')).keys.map(({ last_used_at: _, ...k }) => k);
  return {
    sites: await get('/v1/sites'),
    site: await get(`/v1/sites/${site.id}`),
    keys,
    integrations: await get(`/v1/sites/${site.id}/integrations`),
    reports: await get(`/v1/sites/${site.id}/reports`),
    deliveries: await get(`/v1/sites/${site.id}/deliveries`),
  };
}

test('a Reader sees every page without a change control, and every change it posts is refused with 403', async (t) => {
  const admin = await d.signIn(browser, postern, t, adminUser);
  const { pages, forms } = await crawl(admin);
  const actions = forms.map((f) => f.action.replace(site.id, ':site').replace(/[0-9a-f-]{36}/g, ':id'));
  for (const expected of [
    '/dashboard/sites', '/dashboard/sites/:site/settings', '/dashboard/sites/:site/delete', '/dashboard/sites/:site/wall',
    '/dashboard/sites/:site/integrations', '/dashboard/sites/:site/integrations/:id/test', '/dashboard/sites/:site/integrations/:id/delete',
    '/dashboard/settings/api/keys', '/dashboard/settings/api/keys/:id/revoke',
    '/dashboard/sites/:site/reports', '/dashboard/sites/:site/reports/:id', '/dashboard/sites/:site/reports/:id/send',
    '/dashboard/sites/:site/reports/:id/delete',
  ]) assert.ok(actions.includes(expected), `the Admin's walk found the form posting to ${expected}: ${actions.join(', ')}`);
  d.clean(admin);

  const before = await snapshot();
  const reader = await d.signIn(browser, postern, t, readerUser);
  for (const p of pages) {
    await d.go(reader, postern.url + p);
    const slug = p.replace('/dashboard/', '').replace(site.id, 'site').replace(/[0-9a-f-]{36}/g, 'id').replace(/\/+$/, '').replace(/\//g, '-') || 'sites';
    assert.equal((await reader.locator('.who .badge').textContent()).trim(), 'reader');
    const usable = await reader.evaluate(() => [...document.querySelectorAll('form')]
      .filter((f) => f.method === 'post' && new URL(f.action).pathname !== '/dashboard/logout')
      .flatMap((f) => [...f.elements].filter((e) => e.type !== 'hidden' && !e.matches(':disabled') && e.tagName !== 'FIELDSET').map((e) => `${f.getAttribute('action')}: ${e.outerHTML.slice(0, 100)}`)));
    assert.deepEqual(usable, [], `${p}: a Reader has no usable change control`);
    await d.checkPage(reader, `reader-${slug}`);
  }

  const csrf = await reader.locator('form[action="/dashboard/logout"] input[name=csrf]').inputValue();
  for (const f of forms) {
    const res = await replay(reader, f, csrf);
    assert.equal(res.status(), 403, `a Reader posting ${f.action} (from ${f.page}) is refused`);
    assert.match(await res.text(), /only an Admin can change this/);
  }
  assert.deepEqual(await snapshot(), before, 'nothing changed');
  d.clean(reader);

  // The same replay with the Admin's session and token goes through: the 403s were the role's.
  const keyForm = forms.find((f) => f.action === '/dashboard/settings/api/keys');
  const adminCsrf = await admin.locator('form[action="/dashboard/logout"] input[name=csrf]').inputValue();
  const res = await replay(admin, keyForm, adminCsrf);
  assert.equal(res.status(), 303);
  assert.equal((await snapshot()).keys.length, before.keys.length + 1);
});
