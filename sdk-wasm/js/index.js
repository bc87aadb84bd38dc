// The npm package's entry: Postern's SDK as ES-module exports.
//   import { init, check } from 'postern-sdk';
//   init({ siteId: 'SITE-UUID', endpoint: 'https://collector.example.com' });
// The wasm file is fetched next to this module (import.meta.url) unless
// init is given { wasmUrl }. Calls made before it has loaded wait for it.
// The wall (wall.js) is imported only when a wall is to be shown, so
// bundlers put it in a chunk of its own that visitors without a blocker never load.
import load, * as sdk from './postern_sdk.js';

let ready;

function start(wasmUrl) {
  ready = ready || load(wasmUrl ? { module_or_path: wasmUrl } : undefined);
  return ready;
}

function call(name) {
  return function () {
    const args = arguments;
    return start().then(function () {
      return sdk[name].apply(undefined, args);
    });
  };
}

export function init(options) {
  const { wasmUrl, ...rest } = options || {};
  return start(wasmUrl).then(function () {
    return sdk.init({ ...rest, wall: () => import('./wall.js') });
  });
}

export const check = call('check');
export const getSessionId = call('getSessionId');
export const forceDisplay = call('forceDisplay');
export const hide = call('hide');
