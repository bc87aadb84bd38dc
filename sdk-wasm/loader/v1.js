// Postern's script-tag loader, served at /p/v1.js:
//   <script async src="https://COLLECTOR/p/v1.js" data-site-id="SITE-UUID"></script>
// (add data-keep-utm to keep utm_* parameters in the page URLs sent).
// It defines window.Postern at once, queues calls until the wasm SDK has
// loaded, then replays them in order. It stays tiny because every page
// pays for it; the SDK files it loads are content-hashed and cached for a
// year. scripts/build-sdk fills in the names and minifies it.
(function (w) {
  var me = document.currentScript;
  if (!me || w.Postern && w.Postern.loaded) return;
  var base = new URL(me.src).origin;
  var names = ['init', 'check', 'getSessionId', 'forceDisplay', 'hide'];
  var queue = [];
  var api = {};
  var site = me.getAttribute('data-site-id');
  names.forEach(function (n) {
    // Until the SDK is there, every method answers with a Promise of its result.
    api[n] = function (o) {
      var args = arguments;
      if (n == 'init' && o) site = site || o.siteId;
      return new Promise(function (ok) { queue.push([n, args, ok]); });
    };
  });
  w.Postern = api;
  // A blocker that stops the SDK's own files (the loader ran, the next file
  // failed) would otherwise go unseen: when the collector still answers a
  // fresh request, say so with an `sdk_blocked` event.
  function uuid() {
    var b = crypto.getRandomValues(new Uint8Array(16));
    b[6] = b[6] & 15 | 64;
    b[8] = b[8] & 63 | 128;
    var h = Array.from(b, function (x) { return (x + 256).toString(16).slice(1); }).join('');
    return h.replace(/(.{8})(.{4})(.{4})(.{4})/, '$1-$2-$3-$4-');
  }
  function report() {
    var n = Math.random().toString(36).slice(2);
    var get = function (u, o) { return fetch(base + u, Object.assign({ credentials: 'omit' }, o)); };
    get('/p/echo.js?n=' + n, { cache: 'no-store' }).then(function (r) { return r.text(); }).then(function (t) {
      if (t.indexOf(n) < 0 || !site) return;
      var s;
      try { s = localStorage.getItem('postern:s:' + site); } catch (e) { /* storage refused: a new id */ }
      get('/v1/e', {
        method: 'POST', keepalive: true,
        body: JSON.stringify({
          event_id: uuid(),
          site_id: site,
          session_id: s && s.split('|')[0] || uuid(),
          event_type: 'sdk_blocked',
          page_url: location.origin + location.pathname,
        }),
      });
    }).catch(function () { /* the collector is unreachable too: nothing to tell */ });
  }
  function load() {
    import(base + '/p/@GLUE@').then(function (m) {
      return m.default({ module_or_path: base + '/p/@WASM@' }).then(function () {
        names.forEach(function (n) {
          // The SDK must never break the host page: its errors are logged, not thrown.
          api[n] = function (o) {
            try {
              return n == 'init' ? m.init(Object.assign({ endpoint: base }, o)) : m[n]();
            } catch (e) {
              console.warn(e);
            }
          };
        });
        api.loaded = 1;
        queue.forEach(function (c) { c[2](api[c[0]].apply(0, c[1])); });
      });
    }).catch(function (e) {
      // Not loaded: answer as an undecided check, which never shows a wall,
      // rather than leave callers waiting.
      console.warn('Postern: the SDK could not load', e);
      report();
      names.forEach(function (n) {
        api[n] = function () {
          return Promise.resolve(n == 'check' ? { blocked: false, blockerType: 'unknown' } : undefined);
        };
      });
      queue.forEach(function (c) { c[2](api[c[0]]()); });
    });
  }
  // Nothing is fetched before the page's own `load`: the SDK never competes with it.
  if (document.readyState == 'complete') load(); else w.addEventListener('load', load);
  if (site) api.init({ siteId: site, keepUtm: me.hasAttribute('data-keep-utm') });
})(window);
