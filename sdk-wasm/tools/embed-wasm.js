// Writes a wasm file into a JS module as a template literal, one character
// per byte (U+0000–U+00FF), in place of the module's one '@WALL_WASM@' string:
//   node embed-wasm.js wall.wasm wall.js
// The wall module carries the wall's wasm this way rather than fetching a
// file of its own: one answer less for a blocked visitor (its headers weigh
// more than the literal's cost over the binary, measured with brotli 11: +72 B
// body, −270 B headers), and no second asset for bundlers to handle. Base64
// would cost +530 B. The module decodes it with `charCodeAt`; tools.test.js
// instantiates the result against the SDK's wasm.
'use strict';

const fs = require('node:fs');

const [wasmPath, jsPath] = process.argv.slice(2);
const wasm = fs.readFileSync(wasmPath);
const js = fs.readFileSync(jsPath, 'utf8');

// In a template literal only these need escaping: its delimiter, the escape
// character, `${`, and CR (a raw CR would be read as LF).
const ESCAPES = { 0x60: '\\`', 0x5c: '\\\\', 0x24: '\\$', 0x0d: '\\r' };
let literal = '`';
for (const b of wasm) literal += ESCAPES[b] || String.fromCharCode(b);
literal += '`';

const placeholder = /(["'])@WALL_WASM@\1/g;
const found = js.match(placeholder) || [];
if (found.length !== 1) throw new Error(`${jsPath}: ${found.length} '@WALL_WASM@' strings, expected one`);
fs.writeFileSync(jsPath, js.replace(placeholder, () => literal));
