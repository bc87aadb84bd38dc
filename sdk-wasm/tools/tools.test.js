// Tests of the SDK's byte-saving build steps, run on the real SDK as
// scripts/build-sdk left it in target/sdk-stages/ (wasm-opt's output and
// wasm-bindgen's glue, before any of these steps):
//  - short-imports.js renames the wasm's imports and exports and the glue with
//    them, and changes nothing else: the renamed wasm links against the
//    renamed glue's imports, and the wall's wasm (split from it by
//    sdk-wasm/split) against the renamed wasm's exports, filling its slots;
//  - dead-data.js blanks only unreachable text: every string the code of
//    either wasm (or a pointer held in data) points at is the same before and
//    after, and nothing but data bytes changes;
//  - served-glue.js keeps the loader's API and the imports, and its string
//    passing writes the same bytes into the wasm's memory as wasm-bindgen's.
//  - embed-wasm.js writes the wall's wasm into the wall module so that it
//    decodes byte for byte, and the module's `load` fills the SDK wasm's slots.
'use strict';

const { test } = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { pathToFileURL } = require('node:url');
const esbuild = require('esbuild');
const { readUleb } = require('./leb');

const ROOT = path.resolve(__dirname, '../..');
const STAGES = path.join(ROOT, 'target/sdk-stages');
const WASM_DIS = path.join(ROOT, 'node_modules/.bin/wasm-dis');

/** Copies of the build's intermediate files in a fresh directory. */
function stage() {
  for (const f of ['optimized.wasm', 'wall.wasm', 'wasm-bindgen.js']) {
    if (!fs.existsSync(path.join(STAGES, f))) throw new Error(`${path.join(STAGES, f)} is missing: run scripts/build-sdk first`);
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'postern-tools-'));
  const wasm = path.join(dir, 'postern_sdk_bg.wasm');
  const glue = path.join(dir, 'postern_sdk.js');
  fs.copyFileSync(path.join(STAGES, 'optimized.wasm'), wasm);
  fs.copyFileSync(path.join(STAGES, 'wasm-bindgen.js'), glue);
  // The glue imports its JS snippets (the wall module's import) from beside it.
  fs.cpSync(path.join(STAGES, 'snippets'), path.join(dir, 'snippets'), { recursive: true });
  return { dir, wasm, glue, wall: path.join(STAGES, 'wall.wasm') };
}

const tool = (name, ...args) => execFileSync('node', [path.join(__dirname, name), ...args], { stdio: 'pipe', encoding: 'utf8' });

/** The sections of a wasm binary: [{ id, start, end }] (payload bounds). */
function sections(buf) {
  const out = [];
  let pos = 8;
  while (pos < buf.length) {
    const id = buf[pos];
    const [size, start] = readUleb(buf, pos + 1);
    out.push({ id, start, end: start + size });
    pos = start + size;
  }
  return out;
}

/** The glue's import object, from its own `__wbg_get_imports` (exported for
 *  the test from a copy of its own name: modules are imported once per URL). */
let copies = 0;
async function glueImports(gluePath) {
  const copy = gluePath.replace(/\.js$/, `.imports-${++copies}.mjs`);
  fs.writeFileSync(copy, `${fs.readFileSync(gluePath, 'utf8')}\nexport { __wbg_get_imports };\n`);
  const glue = await import(pathToFileURL(copy).href);
  return glue.__wbg_get_imports();
}

test('short-imports: short names, consistent in the wasm and the glue, and nothing else changed', async (t) => {
  const s = stage();
  t.after(() => fs.rmSync(s.dir, { recursive: true, force: true }));
  const before = fs.readFileSync(s.wasm);
  const glueBefore = fs.readFileSync(s.glue, 'utf8');
  // The unrenamed pair links: the control for the same check after.
  new WebAssembly.Instance(new WebAssembly.Module(before), await glueImports(s.glue));

  tool('short-imports.js', s.wasm, s.glue);
  const after = fs.readFileSync(s.wasm);
  const glue = fs.readFileSync(s.glue, 'utf8');
  const [mBefore, mAfter] = [before, after].map((b) => new WebAssembly.Module(b));

  const importsBefore = WebAssembly.Module.imports(mBefore);
  const importsAfter = WebAssembly.Module.imports(mAfter);
  assert.deepEqual(importsAfter.map((i) => i.kind), importsBefore.map((i) => i.kind), 'the same imports in the same order');
  const renamed = importsAfter.filter((i) => i.module === 'w');
  const glueModule = importsBefore.filter((i) => i.module.endsWith('_bg.js'));
  assert.ok(glueModule.length > 30, `the wasm imports from the glue's own module: ${glueModule.length}`);
  assert.equal(renamed.length, glueModule.length, 'every import of the glue\'s module is renamed');
  // The snippets' functions the wasm calls directly keep their names under a short module name.
  const direct = (list) => list.filter((i) => i.module !== 'w' && !i.module.endsWith('_bg.js'));
  assert.deepEqual(direct(importsAfter).map((i) => i.name), direct(importsBefore).map((i) => i.name));
  assert.ok(direct(importsAfter).every((i) => i.module.length <= 2), 'short snippet module names');
  assert.ok(renamed.every((i) => i.name.length <= 2), 'short names');
  assert.equal(new Set(renamed.map((i) => i.name)).size, renamed.length, 'unique names');
  for (const i of importsBefore.filter((x) => x.module !== 'w' && x.name.startsWith('__wbg_'))) {
    assert.ok(!glue.includes(i.name), `${i.name} is gone from the glue`);
  }

  // Every export the glue reads exists; every export left is read by the
  // glue or imported by the wall's wasm, under the name it had.
  const exported = new Set(WebAssembly.Module.exports(mAfter).map((e) => e.name));
  const read = new Set([...glue.matchAll(/\bwasm\.(\w+)/g)].map((m) => m[1]));
  const wall = new WebAssembly.Module(fs.readFileSync(s.wall));
  const forWall = WebAssembly.Module.imports(wall).map((i) => i.name);
  assert.ok(forWall.length > 10 && WebAssembly.Module.imports(wall).every((i) => i.module === '' && /^[^A-Za-z_]/.test(i.name)), 'the wall imports from the SDK wasm');
  assert.deepEqual([...read].sort(), [...exported].filter((e) => read.has(e)).sort());
  assert.deepEqual([...exported].filter((e) => !read.has(e)).sort(), [...forWall].sort(), 'no export the glue does not read but what the wall imports');
  assert.equal(read.size, new Set([...glueBefore.matchAll(/\bwasm\.(\w+)/g)].map((m) => m[1])).size, 'one new name per export read');
  // The SDK looks its own `__postern_*` exports up by name (task.rs's `resumer`).
  const own = WebAssembly.Module.exports(mBefore).map((e) => e.name).filter((n) => n.startsWith('__postern_'));
  assert.deepEqual(own, ['__postern_wake']);
  assert.ok(exported.has('__postern_wake'), '__postern_wake keeps its name');

  // Code, data, types, tables…: byte for byte the same.
  const body = (buf) => sections(buf).filter((x) => x.id !== 2 && x.id !== 7).map((x) => buf.subarray(x.start, x.end).toString('hex'));
  assert.deepEqual(body(after), body(before));

  // The renamed wasm links against the renamed glue's imports, and the wall's
  // wasm against its exports: it fills the slots its functions are called
  // through (empty until then) and nothing else.
  const sdk = new WebAssembly.Instance(mAfter, await glueImports(s.glue));
  const table = sdk.exports[forWall.find((n) => sdk.exports[n] instanceof WebAssembly.Table && sdk.exports[n].get(1) instanceof Function)];
  const slots = () => Array.from({ length: table.length }, (_, i) => table.get(i));
  const empty = (list) => list.flatMap((f, i) => (f === null && i > 0 ? [i] : []));
  const before_ = slots();
  assert.ok(empty(before_).length >= 3, `the wall's slots are empty before it loads: ${empty(before_)}`);
  new WebAssembly.Instance(wall, { '': sdk.exports });
  const after_ = slots();
  assert.deepEqual(empty(after_), [], 'every slot is filled once the wall is loaded');
  assert.ok(before_.every((f, i) => f === null || f === after_[i]), 'the other slots are unchanged');
});

test('short-imports refuses a glue it does not understand', (t) => {
  const s = stage();
  t.after(() => fs.rmSync(s.dir, { recursive: true, force: true }));
  const glue = fs.readFileSync(s.glue, 'utf8');
  const key = glue.match(/\n\s+(__wbg_\w+): function/)[1];
  fs.writeFileSync(s.glue, glue.replace(`${key}: function`, `${key}Renamed: function`));
  assert.throws(() => tool('short-imports.js', s.wasm, s.glue), /is not exactly one key of the glue/);
});

/** Every address the code holds as a constant (i32.const, either half of an i64.const, a load/store offset). */
function codeAddresses(wasmPath) {
  const wat = execFileSync(WASM_DIS, [wasmPath], { maxBuffer: 1 << 28 }).toString();
  const out = new Set();
  for (const m of wat.matchAll(/i32\.const (-?\d+)|offset=(\d+)|i64\.const (-?\d+)/g)) {
    if (m[1] !== undefined) out.add(Number(m[1]) >>> 0);
    else if (m[2] !== undefined) out.add(Number(m[2]));
    else {
      const v = BigInt.asUintN(64, BigInt(m[3]));
      out.add(Number(v & 0xffffffffn));
      out.add(Number(v >> 32n));
    }
  }
  return out;
}

/** The active data segments: [{ addr, off, len }]. */
function dataSegments(buf) {
  const data = sections(buf).find((x) => x.id === 11);
  const out = [];
  let [count, p] = readUleb(buf, data.start);
  for (let i = 0; i < count; i++) {
    let flags;
    [flags, p] = readUleb(buf, p);
    if (flags === 2) [, p] = readUleb(buf, p);
    p++; // i32.const
    let addr = 0;
    let shift = 0;
    let b;
    do {
      b = buf[p++];
      addr |= (b & 0x7f) << shift;
      shift += 7;
    } while (b & 0x80);
    p++; // end
    let len;
    [len, p] = readUleb(buf, p);
    out.push({ addr: addr >>> 0, off: p, len });
    p += len;
  }
  return out;
}

test('dead-data: only unreferenced text is blanked; every string the SDK points at is unchanged', async (t) => {
  const s = stage();
  t.after(() => fs.rmSync(s.dir, { recursive: true, force: true }));
  const before = fs.readFileSync(s.wasm);
  const report = execFileSync('node', [path.join(__dirname, 'dead-data.js'), s.wasm, s.wall], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  const after = fs.readFileSync(s.wasm);
  assert.equal(after.length, before.length);

  // Only bytes inside data segments changed, each to zero, each from text.
  const segs = dataSegments(before);
  const inData = (i) => segs.some((g) => i >= g.off && i < g.off + g.len);
  const changed = [];
  for (let i = 0; i < before.length; i++) {
    if (before[i] === after[i]) continue;
    assert.ok(inData(i), `byte ${i} outside the data changed`);
    assert.equal(after[i], 0, `byte ${i} is blanked with zero`);
    changed.push(i);
  }
  assert.ok(changed.length > 0, `something was blanked (${report})`);

  // The strings the SDK uses: the text at every address held by the code, or
  // held as a 4-byte word in the data, is the same before and after.
  const addresses = new Set([...codeAddresses(path.join(STAGES, 'optimized.wasm')), ...codeAddresses(s.wall)]);
  for (const g of segs) for (let i = 0; i + 4 <= g.len; i++) addresses.add(before.readUInt32LE(g.off + i));
  const isText = (b) => b === 0x09 || b === 0x0a || (b >= 0x20 && b !== 0x7f);
  const textAt = (buf, addr) => {
    const g = segs.find((x) => addr >= x.addr && addr < x.addr + x.len);
    if (!g) return null;
    let end = g.off + (addr - g.addr);
    while (end < g.off + g.len && isText(buf[end])) end++;
    return buf.subarray(g.off + (addr - g.addr), end).toString('latin1');
  };
  let strings = 0;
  for (const a of addresses) {
    const was = textAt(before, a);
    if (was === null || was.length === 0) continue;
    strings++;
    assert.equal(textAt(after, a), was, `the text at ${a} changed`);
  }
  assert.ok(strings > 50, `the SDK's own strings were compared: ${strings}`);
  // The SDK's own texts (its event names) are among them and kept.
  for (const text of ['pageview', 'adblock_detected', 'wall_displayed']) {
    assert.ok(after.includes(Buffer.from(text)), `${text} is still in the wasm`);
  }
});

test('served-glue: the loader\'s API and the imports kept, and strings passed into the wasm byte for byte as before', async (t) => {
  const s = stage();
  t.after(() => fs.rmSync(s.dir, { recursive: true, force: true }));
  const before = fs.readFileSync(s.glue, 'utf8');
  tool('served-glue.js', s.glue);
  const after = fs.readFileSync(s.glue, 'utf8');

  const exportsOf = (code) => {
    const r = esbuild.buildSync({ stdin: { contents: code, loader: 'js' }, format: 'esm', write: false, metafile: true, logLevel: 'silent' });
    return Object.values(r.metafile.outputs)[0].exports.sort();
  };
  assert.deepEqual(exportsOf(after), ['check', 'default', 'forceDisplay', 'getSessionId', 'hide', 'init']);
  assert.deepEqual(exportsOf(before).filter((e) => e !== 'initSync' && e !== '__postern_wake'), exportsOf(after), 'only initSync and the SDK\'s own export are dropped');
  const keys = (code) => [...code.matchAll(/\n\s+(\w+): function/g)].map((m) => m[1]).sort();
  assert.deepEqual(keys(after), keys(before), 'the same imports');
  assert.ok(after.includes('WebAssembly.instantiateStreaming(response, imports)'));

  // passStringToWasm0 of each glue, run on a memory of its own.
  const passer = (code) => {
    const src = code.slice(code.indexOf('function passStringToWasm0'), code.indexOf('\n}\n', code.indexOf('function passStringToWasm0')) + 2);
    return new Function(`
      let WASM_VECTOR_LEN = 0;
      const cachedTextEncoder = new TextEncoder();
      const memory = new Uint8Array(4096);
      const getUint8ArrayMemory0 = () => memory;
      ${src}
      let next = 8;
      const malloc = (len) => { const p = next; next += len; return p; };
      const realloc = (ptr, old, len) => { const p = next; memory.copyWithin(p, ptr, ptr + old); next += len; return p; };
      return (arg) => { const ptr = passStringToWasm0(arg, malloc, realloc); return Array.from(memory.subarray(ptr, ptr + WASM_VECTOR_LEN)); };
    `)();
  };
  const [wasmBindgen, served] = [passer(before), passer(after)];
  for (const text of ['', 'pageview', 'https://news.example/article?id=1', 'Déjà vu', 'Œuvre — 100 €', 'emoji 😀 and 中文', 'a'.repeat(300)]) {
    assert.deepEqual(served(text), wasmBindgen(text), JSON.stringify(text));
    assert.deepEqual(served(text), Array.from(Buffer.from(text, 'utf8')), JSON.stringify(text));
  }
});

test('embed-wasm: the wall module carries the wall\'s wasm byte for byte, and loads it into the SDK\'s wasm', async (t) => {
  const s = stage();
  t.after(() => fs.rmSync(s.dir, { recursive: true, force: true }));
  tool('short-imports.js', s.wasm, s.glue);
  const wall = path.join(s.dir, 'wall.mjs');
  fs.copyFileSync(path.join(__dirname, '../js/wall.js'), wall);
  tool('embed-wasm.js', s.wall, wall);
  const text = fs.readFileSync(wall, 'utf8');
  assert.ok(!text.includes('@WALL_WASM@'));
  // Every byte value there is, through the same escapes: decoded exactly.
  const all = path.join(s.dir, 'all.bin');
  fs.writeFileSync(all, Buffer.from(Array.from({ length: 512 }, (_, i) => i % 256)));
  const probe = path.join(s.dir, 'probe.mjs');
  fs.writeFileSync(probe, "const WASM = '@WALL_WASM@'; export const bytes = Uint8Array.from(WASM, (c) => c.charCodeAt(0));\n");
  tool('embed-wasm.js', all, probe);
  const { bytes } = await import(pathToFileURL(probe).href);
  assert.deepEqual(Buffer.from(bytes), fs.readFileSync(all));
  // A module without the placeholder, or with two, is refused.
  fs.writeFileSync(probe, 'export const x = 1;\n');
  assert.throws(() => tool('embed-wasm.js', all, probe), /0 '@WALL_WASM@' strings/);

  // The module's own `load` instantiates the wall's wasm into a live SDK wasm:
  // the slots the wall's functions are called through are filled.
  const sdk = new WebAssembly.Instance(new WebAssembly.Module(fs.readFileSync(s.wasm)), await glueImports(s.glue));
  const table = Object.values(sdk.exports).find((v) => v instanceof WebAssembly.Table && v.get(1) instanceof Function);
  const empty = () => Array.from({ length: table.length }, (_, i) => table.get(i)).flatMap((f, i) => (f === null && i > 0 ? [i] : []));
  assert.ok(empty().length >= 3);
  const { load } = await import(pathToFileURL(wall).href);
  const { instance } = await load(sdk.exports);
  assert.ok(instance instanceof WebAssembly.Instance);
  assert.deepEqual(empty(), []);
});
