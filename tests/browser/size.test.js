// The SDK's byte budget (DESIGN §4), checked on every test run so a change
// that crosses it fails here rather than in the next benchmark: the bodies the
// real collector sends a browser that accepts brotli. A visitor without a
// blocker gets the loader, the glue and the wasm; a blocked visitor also the
// wall module (which carries the wall's wasm) and the site's config. (`scripts/bench sdk` counts the same in
// real Firefox, headers included.)
'use strict';

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');
const h = require('./harness');

const LOADER_BUDGET = 1000;
// DESIGN §4's target for a visitor without a blocker is 12 KB (1 KB = 1000 B);
// the SDK is not there yet: 12,288 B measured at commit 6789da7 (its DOM and
// network calls JS helpers, the verdict, session, queue and wall logic staying
// in Rust, the wall's in a wasm of its own, its job table kept safe Rust).
// This budget is that figure with a little slack (the hashed names vary), and
// it only ever goes down.
const CLEAN_BUDGET = 12330;
// DESIGN §4's target for a blocked visitor, wall module and config included (met).
const BLOCKED_BUDGET = 20000;

let postern;

before(async () => {
  postern = await h.startPostern();
});

after(async () => {
  await postern?.stop();
});

/** The body of `p` as the collector sends it to a browser that accepts
 *  brotli (node's http client does not decode it): its coding and size. */
function served(p) {
  return new Promise((resolve, reject) => {
    http.get(postern.url + p, { headers: { 'accept-encoding': 'gzip, deflate, br, zstd' } }, (res) => {
      let bytes = 0;
      res.on('data', (d) => { bytes += d.length; });
      res.on('end', () => {
        if (res.statusCode !== 200) return reject(new Error(`${p} answered ${res.statusCode}`));
        resolve({ path: p, coding: res.headers['content-encoding'], bytes });
      });
    }).on('error', reject);
  });
}

const sum = (xs) => xs.reduce((s, x) => s + x.bytes, 0);
const list = (xs) => xs.map((x) => `${x.path} ${x.coding || 'identity'} ${x.bytes} B`).join(', ');

test('bytes on the wire: a visitor without a blocker and a blocked visitor with the wall', async () => {
  const dist = fs.readdirSync(path.join(h.ROOT, 'sdk-wasm/dist'));
  const named = (re) => {
    const f = dist.filter((n) => re.test(n));
    assert.equal(f.length, 1, `one file matching ${re} in dist: ${dist}`);
    return `/p/${f[0]}`;
  };
  const loader = await served('/p/v1.js');
  const loaderText = await (await fetch(`${postern.url}/p/v1.js`)).text();
  const glue = named(/^postern-[0-9a-f]{8}\.js$/);
  const wasm = named(/^postern-[0-9a-f]{8}\.wasm$/);
  const wall = named(/^wall-[0-9a-f]{8}\.js$/);
  assert.ok(loaderText.includes(glue.slice(3)) && loaderText.includes(wasm.slice(3)), 'the loader names the glue and the wasm');
  const text = (p) => fs.readFileSync(path.join(h.ROOT, 'sdk-wasm/dist', p.slice(3)), 'utf8');
  assert.ok(text(glue).includes(wall.slice(3)), 'the glue names the wall module');

  const clean = [loader, await served(glue), await served(wasm)];
  await postern.api(`/v1/sites/${postern.siteId}`, {
    method: 'PATCH',
    body: JSON.stringify({
      wall: {
        kind: 'soft', dismiss_after_seconds: 5, colors: { background: '#fff8e1', text: '#2b2b2b', accent: '#8a1c1c' },
        subscribe_url: '/subscribe', subscribe_text: 'Go ad-free',
        variants: [
          { name: 'control', weight: 1, title: 'Please allow this site', body: 'We rely on advertising to keep this site free. Please allow it in your ad blocker.' },
          { name: 'offer', weight: 1, title: 'Read without ads', body: 'Allow us in your ad blocker, or subscribe for an ad-free site.' },
        ],
      },
    }),
  });
  const blocked = [...clean, await served(wall), await served(`/v1/sdk/sites/${postern.siteId}/config`)];
  for (const f of blocked.slice(0, 4)) assert.equal(f.coding, 'br', `${f.path} is sent as brotli`);
  console.log(`clean visitor ${sum(clean)} B (${list(clean)})`);
  console.log(`blocked visitor ${sum(blocked)} B (${list(blocked)})`);
  assert.ok(loader.bytes <= LOADER_BUDGET, `loader ${loader.bytes} B > ${LOADER_BUDGET}`);
  assert.ok(sum(clean) <= CLEAN_BUDGET, `a visitor without a blocker downloads ${sum(clean)} B > ${CLEAN_BUDGET}: ${list(clean)}`);
  assert.ok(sum(blocked) <= BLOCKED_BUDGET, `a blocked visitor downloads ${sum(blocked)} B > ${BLOCKED_BUDGET}: ${list(blocked)}`);
});
