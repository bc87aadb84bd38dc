// The npm package as a publisher's project gets it: `npm pack` of
// sdk-wasm/pkg installed from the tarball into a tiny app, which vite (dev
// server and build), webpack 5 and esbuild each bundle, and which then runs in
// Chromium against the real collector. No file is copied by hand: vite and
// webpack follow the glue's `new URL('…_bg.wasm', import.meta.url)`, but
// vite's dev server must not pre-bundle the package (one option); esbuild,
// which cannot follow it, takes one option too (the wasm imported from
// `postern-sdk/postern_sdk_bg.wasm` with the `file` loader, passed as
// `wasmUrl`). The package's types are checked with tsc against a typed
// consumer, and the wasm each bundler ships is the script tag's (the wall's
// wasm is in the wall module, a chunk each bundler splits off).
'use strict';

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const esbuild = require('esbuild');
const webpack = require('webpack');
const h = require('./harness');

const PKG = path.join(h.ROOT, 'sdk-wasm/pkg');
const DIST = path.join(h.ROOT, 'sdk-wasm/dist');
let postern;
let browser;
let publisher;
let project;
const pages = {};

const sha256 = (file) => crypto.createHash('sha256').update(fs.readFileSync(file)).digest('hex');
const scriptTagWasm = () => path.join(DIST, fs.readdirSync(DIST).find((f) => f.endsWith('.wasm')));

// The app: every call of the API, and what each gave once awaited. `run`
// starts the SDK and checks; `display` then shows and hides the wall.
const APP = `
  const settled = (calls) => Promise.all(calls).then((values) => ({ promises: calls.every((c) => c instanceof Promise), values }));
  const run = async (wasmUrl) => {
    const { promises, values: [started, verdict, session] } = await settled([
      init({ siteId: SITE_ID, endpoint: ENDPOINT, ...(wasmUrl ? { wasmUrl } : {}) }), check(), getSessionId(),
    ]);
    return { promises, started: started === undefined, verdict, session };
  };
  window.display = async () => {
    const shown = await settled([forceDisplay()]);
    const wall = !!document.querySelector('[data-postern-wall]');
    const hidden = await settled([hide()]);
    return { promises: shown.promises && hidden.promises, undefined: [...shown.values, ...hidden.values].map((v) => v === undefined), wall, after: !!document.querySelector('[data-postern-wall]') };
  };
`;

before(async () => {
  postern = await h.startPostern();
  browser = await h.launchBrowser();
  publisher = await h.startPublisher(pages);
  project = fs.mkdtempSync(path.join(os.tmpdir(), 'postern-npm-'));
  // The tarball a registry would hold, installed as a publisher installs it.
  const packed = fs.mkdtempSync(path.join(os.tmpdir(), 'postern-pack-'));
  const tarball = execFileSync('npm', ['pack', '--silent', '--pack-destination', packed, PKG], { encoding: 'utf8' }).trim().split('\n').pop();
  fs.writeFileSync(path.join(project, 'package.json'), JSON.stringify({ name: 'publisher-app', private: true, type: 'module' }));
  execFileSync('npm', ['install', '--no-audit', '--no-fund', '--loglevel=error', path.join(packed, tarball)], { cwd: project, stdio: 'pipe' });
  fs.rmSync(packed, { recursive: true, force: true });
  const define = `const SITE_ID = ${JSON.stringify(postern.siteId)}, ENDPOINT = ${JSON.stringify(postern.url)};`;
  fs.writeFileSync(path.join(project, 'main.js'), `import { init, check, getSessionId, forceDisplay, hide } from 'postern-sdk';
${define}${APP}
window.run = () => run();
`);
  fs.writeFileSync(path.join(project, 'main-esbuild.js'), `import { init, check, getSessionId, forceDisplay, hide } from 'postern-sdk';
import wasmUrl from 'postern-sdk/postern_sdk_bg.wasm';
${define}${APP}
window.run = () => run(wasmUrl);
`);
  fs.writeFileSync(path.join(project, 'index.html'), '<!doctype html><html><head><meta charset="utf-8"><title>App</title><link rel="icon" href="data:,"><script type="module" src="/main.js"></script></head><body><p>A publisher\'s app</p></body></html>');
});

after(async () => {
  await browser?.close();
  await publisher?.stop();
  await postern?.stop();
  if (project) fs.rmSync(project, { recursive: true, force: true });
});

/** Serves every file a bundler wrote under `/<name>/`, with the page that loads `script`. */
function publish(name, dir, script, { module = true } = {}) {
  const types = { '.js': 'text/javascript', '.wasm': 'application/wasm', '.html': 'text/html; charset=utf-8' };
  for (const f of fs.readdirSync(dir, { recursive: true })) {
    const file = path.join(dir, f);
    if (fs.statSync(file).isFile()) pages[`/${name}/${f}`] = { type: types[path.extname(f)] || 'application/octet-stream', body: fs.readFileSync(file) };
  }
  pages[`/${name}/`] = `<!doctype html><html><head><meta charset="utf-8"><title>${name}</title><script ${module ? 'type="module" ' : ''}src="/${name}/${script}"></script></head><body><p>A bundled page</p></body></html>`;
  return `${publisher.origin}/${name}/`;
}

/** The bundled wasm files of an output directory: exactly one, the script tag's bytes. */
function assertSameWasm(dir) {
  const wasm = fs.readdirSync(dir, { recursive: true }).filter((f) => f.endsWith('.wasm'));
  assert.equal(wasm.length, 1, `one wasm in ${dir}: ${wasm}`);
  assert.equal(sha256(path.join(dir, wasm[0])), sha256(scriptTagWasm()), 'the bundle ships the script tag\'s wasm');
}

/** Runs the app at `url`: each call returns a Promise of what the types say; a blocked visitor gets the wall. */
async function runs(url, t) {
  const clean = await h.openPage(browser, url, t);
  await clean.waitForFunction(() => typeof window.run === 'function');
  const r = await clean.evaluate(() => window.run());
  assert.deepEqual({ ...r, session: typeof r.session }, { promises: true, started: true, verdict: { blocked: false, blockerType: null }, session: 'string' });
  assert.match(r.session, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.equal(await h.wallOpen(clean), false);
  assert.deepEqual(await clean.evaluate(() => window.display()), { promises: true, undefined: [true, true], wall: true, after: false });
  clean.assertClean();
  // The collector has this visit.
  await h.eventually(async () => (await postern.events(postern.siteId)).some((e) => e.session_id === r.session && e.event_type === 'pageview'));

  const blocked = await h.openPage(browser, url, t, { block: h.blockBaitRequest });
  await blocked.waitForFunction(() => typeof window.run === 'function');
  const b = await blocked.evaluate(() => window.run());
  assert.deepEqual(b.verdict, { blocked: true, blockerType: 'network' });
  await h.waitForWall(blocked);
  blocked.assertClean();
}

test('the package: an exports map, the script tag\'s wasm, types that tsc checks against a typed consumer', () => {
  const installed = path.join(project, 'node_modules/postern-sdk');
  const pkg = JSON.parse(fs.readFileSync(path.join(installed, 'package.json'), 'utf8'));
  assert.equal(pkg.name, 'postern-sdk');
  assert.deepEqual(pkg.exports['.'], { types: './index.d.ts', default: './index.js' });
  assert.deepEqual(fs.readdirSync(installed).sort(), ['index.d.ts', 'index.js', 'package.json', 'postern_sdk.js', 'postern_sdk_bg.wasm', 'snippets', 'wall.js']);
  assert.equal(sha256(path.join(installed, 'postern_sdk_bg.wasm')), sha256(scriptTagWasm()), 'the package ships the script tag\'s wasm');

  fs.writeFileSync(path.join(project, 'typed.ts'), `
    import { init, check, getSessionId, forceDisplay, hide, type Verdict, type BlockerType } from 'postern-sdk';
    export async function typed(): Promise<void> {
      const started: Promise<void> = init({ siteId: 'a-site', endpoint: 'https://collector.example', variant: 'offer', debug: true, wasmUrl: new URL('https://cdn.example/x.wasm') });
      await started;
      const verdict: Verdict = await check();
      const blocked: boolean = verdict.blocked;
      const kind: BlockerType | null = verdict.blockerType;
      const session: string = await getSessionId();
      const shown: Promise<void> = forceDisplay();
      const hidden: Promise<void> = hide();
      console.log(blocked, kind, session, shown, hidden);
      // @ts-expect-error every call returns a Promise: the session id is awaited
      const notAwaited: string = getSessionId();
      // @ts-expect-error siteId is required
      void init({ endpoint: 'https://collector.example' });
      // @ts-expect-error blockerType is one of the four kinds or null
      const wrongKind: 'dns' = verdict.blockerType;
      console.log(notAwaited, wrongKind);
    }
  `);
  fs.writeFileSync(path.join(project, 'tsconfig.json'), JSON.stringify({
    compilerOptions: { strict: true, noEmit: true, target: 'es2022', module: 'esnext', moduleResolution: 'bundler', lib: ['es2022', 'dom'], types: [] },
    files: ['typed.ts'],
  }));
  const tsc = path.join(h.ROOT, 'node_modules/.bin/tsc');
  try {
    execFileSync(tsc, ['-p', project], { cwd: project, encoding: 'utf8', stdio: 'pipe' });
  } catch (e) {
    assert.fail(`tsc found errors:\n${e.stdout}${e.stderr}`);
  }
});

test('vite, dev server: the page runs with the one documented option (not pre-bundled)', async (t) => {
  const vite = await import('vite');
  const server = await vite.createServer({
    root: project, configFile: false, logLevel: 'error', clearScreen: false,
    // Pre-bundling moves the glue away from its wasm (README, "npm").
    optimizeDeps: { exclude: ['postern-sdk'] },
    server: { host: '127.0.0.1', port: 0, strictPort: false, allowedHosts: ['publisher.test'] },
  });
  await server.listen();
  t.after(() => server.close());
  const { port } = server.httpServer.address();
  await runs(`http://publisher.test:${port}/`, t);
});

test('vite, build: the page runs from what vite wrote', async (t) => {
  const vite = await import('vite');
  const out = path.join(project, 'dist-vite');
  await vite.build({ root: project, configFile: false, logLevel: 'error', base: '/vite/', build: { outDir: out, emptyOutDir: true } });
  assertSameWasm(out);
  // vite writes the page too: it is served as written.
  for (const f of fs.readdirSync(out, { recursive: true })) {
    const file = path.join(out, f);
    if (fs.statSync(file).isFile()) pages[`/vite/${f}`] = { type: f.endsWith('.wasm') ? 'application/wasm' : f.endsWith('.html') ? 'text/html; charset=utf-8' : 'text/javascript', body: fs.readFileSync(file) };
  }
  pages['/vite/'] = pages['/vite/index.html'];
  await runs(`${publisher.origin}/vite/`, t);
});

test('webpack 5: the page runs from what webpack wrote', async (t) => {
  const out = path.join(project, 'dist-webpack');
  const stats = await new Promise((resolve, reject) => {
    webpack({ mode: 'production', context: project, entry: './main.js', output: { path: out, filename: 'bundle.js', publicPath: 'auto', clean: true } }, (err, s) => (err ? reject(err) : resolve(s)));
  });
  assert.equal(stats.hasErrors(), false, stats.toString('errors-only'));
  assertSameWasm(out);
  await runs(publish('webpack', out, 'bundle.js', { module: false }), t);
});

test('esbuild: the page runs with the one documented option (the wasm as a file)', async (t) => {
  const out = path.join(project, 'dist-esbuild');
  await esbuild.build({
    absWorkingDir: project,
    entryPoints: ['main-esbuild.js'],
    bundle: true,
    format: 'esm',
    minify: true,
    outdir: out,
    loader: { '.wasm': 'file' },
    logLevel: 'error',
  });
  assertSameWasm(out);
  await runs(publish('esbuild', out, 'main-esbuild.js'), t);
});
