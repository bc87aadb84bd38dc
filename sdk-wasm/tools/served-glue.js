// Trims wasm-bindgen's glue for the one way the collector's files are used:
//   node served-glue.js postern_sdk.js
// The loader (sdk-wasm/loader/v1.js) calls the default export with
// `{module_or_path: URL}` of the wasm, which the collector serves as
// `application/wasm`. So the served glue keeps streaming compilation only:
// no `initSync`, no fallbacks for servers with another MIME type, for
// modules given as bytes or for the deprecated call forms (~0.2 KB gzip),
// nor fallbacks for browsers older than the wasm features it needs.
// scripts/build-sdk runs it before esbuild, which drops what became unused;
// the npm package keeps wasm-bindgen's glue whole. wasm-bindgen's own flags do
// not do it: `--omit-default-module-path` drops only the default wasm path
// (replaced here anyway), and `--encode-into never` installs the encode-then-
// copy fallback unconditionally while keeping the ASCII loop.
'use strict';

const fs = require('node:fs');

const [gluePath] = process.argv.slice(2);
let glue = fs.readFileSync(gluePath, 'utf8');

/** Replaces the top-level function that starts with `head` (up to its closing brace at column 0). */
function replaceFunction(head, body) {
  const start = glue.indexOf(`\n${head}(`);
  const end = glue.indexOf('\n}\n', start);
  if (start < 0 || end < 0) throw new Error(`the glue has no function "${head}"`);
  glue = glue.slice(0, start + 1) + body + glue.slice(end + 3);
}

replaceFunction('async function __wbg_load', `async function __wbg_load(response, imports) {
    if (!response.ok) throw new Error(\`failed to fetch Wasm: \${response.status}\`);
    return WebAssembly.instantiateStreaming(response, imports);
}
`);
replaceFunction('async function __wbg_init_once', `async function __wbg_init_once({ module_or_path }) {
    const { instance, module } = await __wbg_load(await fetch(module_or_path), __wbg_get_imports());
    return __wbg_finalize_init(instance, module);
}
`);
/** Removes `text`, which must be in the glue. */
function drop(text, why) {
  if (!glue.includes(text)) throw new Error(`the glue has no ${why}`);
  glue = glue.replace(text, '');
}

// The fallback for browsers without `TextEncoder.encodeInto` (not used any
// more, see below).
drop(`
if (!('encodeInto' in cachedTextEncoder)) {
    cachedTextEncoder.encodeInto = function (arg, view) {
        const buf = cachedTextEncoder.encode(arg);
        view.set(buf);
        return {
            read: arg.length,
            written: buf.length
        };
    };
}
`, 'encodeInto fallback');
// Strings into the wasm: encoded whole then copied, wasm-bindgen's own path
// when no `realloc` is given, instead of its ASCII loop with `encodeInto`
// and reallocation (same bytes in the wasm's memory; the SDK passes short
// strings).
replaceFunction('function passStringToWasm0', `function passStringToWasm0(arg, malloc) {
    const buf = cachedTextEncoder.encode(arg);
    const ptr = malloc(buf.length, 1) >>> 0;
    getUint8ArrayMemory0().subarray(ptr, ptr + buf.length).set(buf);
    WASM_VECTOR_LEN = buf.length;
    return ptr;
}
`);

// The raw export's glue wrapper: the SDK reads the raw export itself (task.rs's `resumer`).
replaceFunction('export function __postern_wake', '');

// Strings out of the wasm: decoded without wasm-bindgen's count of the
// bytes decoded, which swaps the decoder after 2 GB for Safari's sake; the
// SDK decodes a few KB per check.
drop(`const MAX_SAFARI_DECODE_BYTES = 2146435072;
let numBytesDecoded = 0;
`, 'Safari decode limit');
replaceFunction('function decodeText', `function decodeText(bytes) {
    return cachedTextDecoder.decode(bytes);
}
`);

// The memory's DataView is made again when the memory grew (a new buffer):
// wasm-bindgen's extra test of `detached` only spares that comparison.
const memory = glue.match(/cachedDataViewMemory0\.buffer !== (wasm\.\w+)\.buffer/);
if (!memory) throw new Error('the glue has no DataView cache as expected');
replaceFunction('function getDataViewMemory0', `function getDataViewMemory0() {
    if (cachedDataViewMemory0 === null || cachedDataViewMemory0.buffer !== ${memory[1]}.buffer) {
        cachedDataViewMemory0 = new DataView(${memory[1]}.buffer);
    }
    return cachedDataViewMemory0;
}
`);

const exportLine = 'export { initSync, __wbg_init as default };';
if (!glue.includes(exportLine)) throw new Error('the glue does not export initSync as expected');
glue = glue.replace(exportLine, 'export { __wbg_init as default };');
fs.writeFileSync(gluePath, glue);
