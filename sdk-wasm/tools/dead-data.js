// Blanks the texts in the wasm's data that nothing can read any more:
//   node dead-data.js served.wasm [wall.wasm…]
// With `--traps-never-happen` wasm-opt deletes the code that led to a trap
// (an allocation failure, a `RefCell` misuse, an `async fn` polled after it
// ended…), but never the panic messages that code would have formatted: data
// segments are bytes to binaryen. Those ~0.4 KB of English and the integer
// formatter's digit table compress badly; zeros compress to almost nothing.
//
// A text is dead when no address the module can form points into it or up
// to 16 bytes before it. The addresses are every constant in the code
// (`i32.const`, both halves of an `i64.const`, load/store offsets) and every
// 4-byte word of the data (a `&str` or a `Location` held in a table) that
// itself lies within 512 bytes after such an address (lookup tables, structs).
// That errs towards keeping: a text next to live data stays. What it blanks
// is printed, so a build shows it; tools.test.js proves that every text an
// address in the code or the data points at is unchanged. No standard flag
// does this: binaryen treats data as bytes, and only a nightly Rust
// (`panic_immediate_abort`) leaves the panic texts out in the first place.
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const { readUleb, readSleb } = require('./leb');

const REACH = 512;
// Further modules that share the memory (the wall's wasm): their code's addresses count too.
const [wasmPath, ...sharing] = process.argv.slice(2);
const wasm = fs.readFileSync(wasmPath);

const uleb = (pos) => readUleb(wasm, pos);
const sleb = (pos) => readSleb(wasm, pos);

/** The active data segments: [address, offset in the file, length]. */
function segments() {
  const out = [];
  let pos = 8;
  while (pos < wasm.length) {
    const id = wasm[pos++];
    let size;
    [size, pos] = uleb(pos);
    const end = pos + size;
    if (id === 11) {
      let count;
      let p;
      [count, p] = uleb(pos);
      for (let i = 0; i < count; i++) {
        let flags;
        [flags, p] = uleb(p);
        if (flags === 2) [, p] = uleb(p);
        else if (flags !== 0) throw new Error(`data segment ${i}: passive segments are not handled`);
        if (wasm[p++] !== 0x41) throw new Error(`data segment ${i}: its address is not an i32.const`);
        let addr;
        [addr, p] = sleb(p);
        if (wasm[p++] !== 0x0b) throw new Error(`data segment ${i}: unexpected address expression`);
        let len;
        [len, p] = uleb(p);
        out.push([addr >>> 0, p, len]);
        p += len;
      }
    }
    pos = end;
  }
  return out;
}

/** The length of the text character (printable ASCII, tab, newline or a whole UTF-8 sequence) at `at`, else 0. */
function charLen(at, end) {
  const b = wasm[at];
  if ((b >= 0x20 && b < 0x7f) || b === 9 || b === 10) return 1;
  const n = b >= 0xc2 && b < 0xe0 ? 2 : b >= 0xe0 && b < 0xf0 ? 3 : b >= 0xf0 && b < 0xf5 ? 4 : 0;
  if (!n || at + n > end) return 0;
  for (let k = 1; k < n; k++) if ((wasm[at + k] & 0xc0) !== 0x80) return 0;
  return n;
}

const segs = segments();
const wasmDis = path.join(__dirname, '../../node_modules/.bin/wasm-dis');
const wat = [wasmPath, ...sharing].map((w) => execFileSync(wasmDis, [w], { maxBuffer: 1 << 28 }).toString()).join('\n');
const roots = [];
for (const m of wat.matchAll(/i32\.const (-?\d+)|offset=(\d+)|i64\.const (-?\d+)/g)) {
  if (m[1] !== undefined) roots.push(Number(m[1]) >>> 0);
  else if (m[2] !== undefined) roots.push(Number(m[2]));
  else {
    const v = BigInt.asUintN(64, BigInt(m[3]));
    roots.push(Number(v & 0xffffffffn), Number(v >> 32n));
  }
}
const words = [];
for (const [addr, off, len] of segs) for (let i = 0; i + 4 <= len; i++) words.push([addr + i, wasm.readUInt32LE(off + i)]);

// The addresses reachable from the roots, through data words that lie in reach.
const refs = roots.slice();
const inReach = (at) => refs.some((r) => at >= r - 16 && at <= r + REACH);
const taken = new Set();
for (let grew = true; grew; ) {
  grew = false;
  for (const [at, v] of words) {
    if (!taken.has(at) && inReach(at)) {
      taken.add(at);
      refs.push(v);
      grew = true;
    }
  }
}

let blanked = 0;
for (const [addr, off, len] of segs) {
  for (let i = 0; i < len; ) {
    if (!charLen(off + i, off + len)) {
      i++;
      continue;
    }
    let j = i;
    for (let n; j < len && (n = charLen(off + j, off + len)); ) j += n;
    const start = addr + i;
    const end = addr + j;
    if (j - i >= 8 && !refs.some((r) => r >= start - 16 && r <= end)) {
      console.error(`dead-data: blanked ${JSON.stringify(wasm.subarray(off + i, off + j).toString())}`);
      wasm.fill(0, off + i, off + j);
      blanked += j - i;
    }
    i = j;
  }
}
console.error(`dead-data: ${blanked} bytes of unreachable text blanked`);
fs.writeFileSync(wasmPath, wasm);
