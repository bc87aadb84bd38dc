// LEB128 integers as the wasm binary format stores them: each reader returns
// [value, position after it].
'use strict';

function readUleb(buf, pos) {
  let n = 0;
  let shift = 0;
  let b;
  do {
    b = buf[pos++];
    n += (b & 0x7f) * 2 ** shift;
    shift += 7;
  } while (b & 0x80);
  return [n, pos];
}

// Signed, up to 32 bits (i32.const operands).
function readSleb(buf, pos) {
  let n = 0;
  let shift = 0;
  let b;
  do {
    b = buf[pos++];
    n |= (b & 0x7f) << shift;
    shift += 7;
  } while (b & 0x80);
  if (shift < 32 && b & 0x40) n |= -1 << shift;
  return [n, pos];
}

module.exports = { readUleb, readSleb };
