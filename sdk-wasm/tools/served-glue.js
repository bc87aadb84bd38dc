// Trims wasm-bindgen's glue for the one way the collector's files are used:
//   node served-glue.js postern_sdk.js
// The loader (sdk-wasm/loader/v1.js) calls the default export with
// `{module_or_path: URL}` of the wasm, which the collector serves as
// `application/wasm`. So the served glue keeps streaming compilation only:
// no `initSync`, no fallbacks for servers with another MIME type, for
// modules given as bytes or for the deprecated call forms (~0.2 KB gzip).
// scripts/build-sdk runs it before esbuild, which drops what became unused;
// the npm package keeps wasm-bindgen's glue whole.
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
const exportLine = 'export { initSync, __wbg_init as default };';
if (!glue.includes(exportLine)) throw new Error('the glue does not export initSync as expected');
glue = glue.replace(exportLine, 'export { __wbg_init as default };');
fs.writeFileSync(gluePath, glue);
