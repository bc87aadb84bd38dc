// Postern's script-tag loader, served at /p/v1.js:
//   <script async src="https://COLLECTOR/p/v1.js" data-site-id="SITE-UUID"></script>
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
  names.forEach(function (n) {
    // Until the SDK is there, every method answers with a Promise of its result.
    api[n] = function () {
      var args = arguments;
      return new Promise(function (ok) { queue.push([n, args, ok]); });
    };
  });
  w.Postern = api;
  // The SDK is fetched once the page has loaded: it never competes with the
  // page's own resources nor delays its load event.
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
      // Not loaded (a blocker may block the SDK itself): answer as an undecided
      // check, which never shows a wall, rather than leave callers waiting.
      console.warn('Postern: the SDK could not load', e);
      names.forEach(function (n) {
        api[n] = function () {
          return Promise.resolve(n == 'check' ? { blocked: false, blockerType: 'unknown' } : undefined);
        };
      });
      queue.forEach(function (c) { c[2](api[c[0]]()); });
    });
  }
  if (document.readyState == 'complete') load(); else w.addEventListener('load', load);
  var site = me.getAttribute('data-site-id');
  if (site) api.init({ siteId: site });
})(window);
