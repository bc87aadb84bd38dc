// The SDK's byte budget (issue 4, DESIGN §4), checked on every test run so a
// change that crosses it fails here rather than in the next benchmark: the
// files the collector embeds and serves, gzip -9 as `bench/sdk.js` counts them.
'use strict';

const { test } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const zlib = require('node:zlib');
const h = require('./harness');

const LOADER_BUDGET = 1536;
const TOTAL_BUDGET = 20480;

test('loader <= 1.5 KB and loader + glue + wasm <= 20 KB gzip', async () => {
  const dist = path.join(h.ROOT, 'sdk-wasm/dist');
  const files = fs.readdirSync(dist);
  const gz = (f) => zlib.gzipSync(fs.readFileSync(path.join(dist, f)), { level: 9 }).length;
  assert.ok(files.includes('v1.js'), `the loader is built: ${files}`);
  assert.ok(files.some((f) => f.endsWith('.wasm')) && files.some((f) => f !== 'v1.js' && f.endsWith('.js')), `glue and wasm are built: ${files}`);
  const loader = gz('v1.js');
  const total = files.reduce((sum, f) => sum + gz(f), 0);
  assert.ok(loader <= LOADER_BUDGET, `loader ${loader} B gzip > ${LOADER_BUDGET}`);
  assert.ok(total <= TOTAL_BUDGET, `loader + glue + wasm ${total} B gzip > ${TOTAL_BUDGET} (${files.map((f) => `${f} ${gz(f)}`).join(', ')})`);
});
