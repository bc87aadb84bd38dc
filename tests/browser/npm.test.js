// The npm package: a bundler project installs sdk-wasm/pkg from its local
// path, esbuild bundles a tiny page with it, and the page runs in Chromium
// against the real collector.
'use strict';

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const esbuild = require('esbuild');
const h = require('./harness');

const PKG = path.join(h.ROOT, 'sdk-wasm/pkg');
let postern;
let browser;
let publisher;
let project;
const pages = {};

before(async () => {
  postern = await h.startPostern();
  browser = await h.launchBrowser();
  publisher = await h.startPublisher(pages);
  project = fs.mkdtempSync(path.join(os.tmpdir(), 'postern-npm-'));
});

after(async () => {
  await browser?.close();
  await publisher?.stop();
  await postern?.stop();
  if (project) fs.rmSync(project, { recursive: true, force: true });
});

test('a bundler project installs the package from its path, bundles it with esbuild, and it runs', async (t) => {
  fs.writeFileSync(path.join(project, 'package.json'), JSON.stringify({ name: 'bundled-page', private: true, type: 'module' }));
  execFileSync('npm', ['install', '--no-audit', '--no-fund', '--loglevel=error', PKG], { cwd: project, stdio: 'pipe' });
  const installed = JSON.parse(fs.readFileSync(path.join(project, 'node_modules/postern-sdk/package.json'), 'utf8'));
  assert.equal(installed.name, 'postern-sdk');

  fs.writeFileSync(path.join(project, 'main.js'), `
    import { init, check, getSessionId, forceDisplay, hide } from 'postern-sdk';
    window.run = async () => {
      await init({ siteId: SITE_ID, endpoint: ENDPOINT });
      const verdict = await check();
      return { verdict, session: await getSessionId(), api: [forceDisplay, hide].every((f) => typeof f === 'function') };
    };
  `);
  const out = path.join(project, 'dist');
  await esbuild.build({
    entryPoints: [path.join(project, 'main.js')],
    bundle: true,
    format: 'esm',
    minify: true,
    outfile: path.join(out, 'bundle.js'),
    define: { SITE_ID: JSON.stringify(postern.siteId), ENDPOINT: JSON.stringify(postern.url) },
    logLevel: 'error',
  });
  // The wasm is fetched next to the module that imports it (import.meta.url).
  fs.copyFileSync(path.join(project, 'node_modules/postern-sdk/postern_sdk_bg.wasm'), path.join(out, 'postern_sdk_bg.wasm'));
  pages['/bundled/bundle.js'] = { type: 'text/javascript', body: fs.readFileSync(path.join(out, 'bundle.js')) };
  pages['/bundled/postern_sdk_bg.wasm'] = { type: 'application/wasm', body: fs.readFileSync(path.join(out, 'postern_sdk_bg.wasm')) };
  pages['/bundled/'] = '<!doctype html><html><head><meta charset="utf-8"><title>Bundled</title><script type="module" src="/bundled/bundle.js"></script></head><body><p>A bundled page</p></body></html>';

  const clean = await h.openPage(browser, `${publisher.origin}/bundled/`, t);
  await clean.waitForFunction(() => typeof window.run === 'function');
  const r = await clean.evaluate(() => window.run());
  assert.deepEqual(r.verdict, { blocked: false, blockerType: null });
  assert.equal(r.api, true);
  assert.equal(await h.wallOpen(clean), false);
  clean.assertClean();

  const blocked = await h.openPage(browser, `${publisher.origin}/bundled/`, t, { block: h.blockBaitRequest });
  await blocked.waitForFunction(() => typeof window.run === 'function');
  const b = await blocked.evaluate(() => window.run());
  assert.deepEqual(b.verdict, { blocked: true, blockerType: 'network' });
  await h.waitForWall(blocked);
  blocked.assertClean();

  const events = await h.eventually(async () => {
    const ev = await postern.events(postern.siteId);
    return ev.length >= 4 && ev;
  });
  const bySession = (s) => events.filter((e) => e.session_id === s).map((e) => e.event_type).sort();
  assert.deepEqual(bySession(r.session), ['pageview']);
  assert.deepEqual(bySession(b.session), ['adblock_detected', 'pageview', 'wall_displayed']);
});
