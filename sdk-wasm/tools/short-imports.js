// Gives the wasm's imports and exports short names, in both the wasm and its glue:
//   node short-imports.js postern_sdk_bg.wasm postern_sdk.js
// wasm-bindgen names each import `__wbg_<method>_<16 hex digits>` in the
// module "./postern_sdk_bg.js"; with a hundred imports those names (which
// gzip cannot shrink: the hashes are random) weigh ~2 KB gzip across the two
// files, as much as the wall's CSS. Like a minifier's property mangling, the
// new names are `a`, `b`, … in import order. The exports (the API, the
// closure shims `wasm_bindgen__convert__closures_____invoke__<hash>`, the
// allocator) are only read by the glue as `wasm.<name>`: they become `A`,
// `B`, … the same way, except `__postern_*`, which the SDK itself looks up
// by name, and the names that do not start with a letter or `_`, which the
// wall's wasm imports by name (already short).
// scripts/build-sdk runs it on the npm package's wasm and glue, which the
// collector serves too (tools.test.js checks it).
// binaryen's own `--minify-imports-and-exports-and-modules` does the wasm's
// half (the glue would still need renaming from its mapping), but it keeps
// the exports the glue never reads and names in another order: +84 B gzip,
// +118 B brotli for the served wasm and glue.
'use strict';

const fs = require('node:fs');
const { readUleb } = require('./leb');

const [wasmPath, gluePath] = process.argv.slice(2);
const wasm = fs.readFileSync(wasmPath);
let glue = fs.readFileSync(gluePath, 'utf8');

function leb(n) {
  const out = [];
  do {
    let b = n % 128;
    n = Math.floor(n / 128);
    if (n) b |= 0x80;
    out.push(b);
  } while (n);
  return Buffer.from(out);
}

const name = (s) => Buffer.concat([leb(Buffer.byteLength(s)), Buffer.from(s)]);

/** The end of an import's description (function, table, memory, global, tag). */
function skipDesc(buf, pos) {
  const kind = buf[pos++];
  const limits = (p) => {
    const flags = buf[p++];
    [, p] = readUleb(buf, p);
    if (flags & 1) [, p] = readUleb(buf, p);
    return p;
  };
  switch (kind) {
    case 0: return readUleb(buf, pos)[1];
    case 1: return limits(pos + 1);
    case 2: return limits(pos);
    case 3: return pos + 2;
    case 4: return readUleb(buf, pos + 1)[1];
    default: throw new Error(`unknown import kind ${kind}`);
  }
}

function shortName(i) {
  const letters = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ';
  let s = '';
  do {
    s = letters[i % letters.length] + s;
    i = Math.floor(i / letters.length) - 1;
  } while (i >= 0);
  return s;
}

const moduleName = glue.match(/\n\s+"(\.\/[\w.-]+_bg\.js)": import0,\n/);
if (!moduleName) throw new Error('the glue does not name its import module as expected');
const MODULE = moduleName[1];
const NEW_MODULE = 'w';

/** The export section with every export renamed, and the glue's `wasm.<name>` with it. */
function exportSection(start, end) {
  let [count, p] = readUleb(wasm, start);
  const body = [];
  for (let i = 0; i < count; i++) {
    let len;
    [len, p] = readUleb(wasm, p);
    const field = wasm.toString('utf8', p, p + len);
    p += len;
    // An export is its kind (one byte) and an index.
    const descEnd = readUleb(wasm, p + 1)[1];
    // The SDK reads `__postern_*` from the instance's exports by this name
    // (task.rs's `resumer`); the wall's wasm imports the names that do not
    // start with a letter or `_` (sdk-wasm/split), already short.
    const kept = field.startsWith('__postern_') || /^[^A-Za-z_]/.test(field);
    const uses = kept ? null : new RegExp(`\\bwasm\\.${field}\\b`, 'g');
    if (kept) {
      body.push(name(field), wasm.subarray(p, descEnd));
    } else if (uses.test(glue)) {
      const short = shortName(body.length / 2);
      glue = glue.replace(uses, `wasm.${short}`);
      body.push(name(short), wasm.subarray(p, descEnd));
    }
    // An export the glue never reads (wasm-bindgen's `__abort_handler` and
    // `__instance_terminated` globals, `__wbindgen_free` when no string
    // leaves the wasm) is left out: nothing else sees the exports.
    p = descEnd;
  }
  if (p !== end) throw new Error('the export section did not parse');
  const section = Buffer.concat([leb(body.length / 2), ...body]);
  return Buffer.concat([Buffer.from([7]), leb(section.length), section]);
}

/** Snippet modules the wasm imports from directly, and their short names. */
const snippets = new Map();
const out = [wasm.subarray(0, 8)];
let pos = 8;
let renamed = 0;
while (pos < wasm.length) {
  const id = wasm[pos];
  const [size, start] = readUleb(wasm, pos + 1);
  const end = start + size;
  if (id === 7) {
    out.push(exportSection(start, end));
    pos = end;
    continue;
  }
  if (id !== 2) {
    out.push(wasm.subarray(pos, end));
    pos = end;
    continue;
  }
  let [count, p] = readUleb(wasm, start);
  const body = [leb(count)];
  for (let i = 0; i < count; i++) {
    let len;
    [len, p] = readUleb(wasm, p);
    const mod = wasm.toString('utf8', p, p + len);
    p += len;
    [len, p] = readUleb(wasm, p);
    const field = wasm.toString('utf8', p, p + len);
    p += len;
    const descEnd = skipDesc(wasm, p);
    if (mod.startsWith('./snippets/')) {
      // A snippet's function the wasm calls directly: the module gets a short
      // name (the glue's key for the snippet's namespace), the function keeps its own.
      if (!snippets.has(mod)) snippets.set(mod, `${snippets.size}`);
      body.push(name(snippets.get(mod)), name(field));
    } else if (mod === MODULE) {
      const short = shortName(renamed++);
      // The key of the import's function in the glue, exactly once.
      const key = new RegExp(`\\n(\\s+)${field}: function`, 'g');
      const hits = glue.match(key);
      if (!hits || hits.length !== 1 || glue.split(field).length !== 2) throw new Error(`${field} is not exactly one key of the glue`);
      glue = glue.replace(key, `\n$1${short}: function`);
      body.push(name(NEW_MODULE), name(short));
    } else {
      body.push(name(mod), name(field));
    }
    body.push(wasm.subarray(p, descEnd));
    p = descEnd;
  }
  const section = Buffer.concat(body);
  out.push(Buffer.from([2]), leb(section.length), section);
  pos = end;
}
glue = glue.replace(moduleName[0], `\n        ${NEW_MODULE}: import0,\n`);
// wasm-bindgen writes the key of a snippet's namespace once per function
// imported from it (the same module each time): one key is kept, renamed.
for (const [mod, short] of snippets) {
  const key = new RegExp(`\\n\\s+"${mod.replace(/[.]/g, '\\.')}": (import\\d+),`, 'g');
  const keys = [...glue.matchAll(key)];
  if (!keys.length) throw new Error(`the glue has no key for ${mod}`);
  glue = glue.replace(key, '');
  glue = glue.replace(`\n        ${NEW_MODULE}: import0,\n`, `\n        ${NEW_MODULE}: import0,\n        "${short}": ${keys[0][1]},\n`);
}
fs.writeFileSync(wasmPath, Buffer.concat(out));
fs.writeFileSync(gluePath, glue);
console.error(`short-imports: ${renamed} imports and the exports renamed`);
