// Postern's script-tag loader, served at /p/v1.js:
//   <script async src="https://COLLECTOR/p/v1.js" data-site-id="SITE-UUID"></script>
// (add data-keep-utm to keep utm_* parameters in the page URLs sent).
// It defines window.Postern at once, queues calls until the wasm SDK has
// loaded, then replays them in order. It stays tiny because every page
// pays for it (arrow functions, one fetch helper); the SDK files it loads
// are content-hashed and cached for a year. scripts/build-sdk fills in the
// names and minifies it.
((w, me) => {
  if (!me || w.Postern && w.Postern.loaded) return;
  var base = new URL(me.src).origin;
  var names = ['init', 'check', 'getSessionId', 'forceDisplay', 'hide'];
  var queue = [];
  var api = {};
  var site = me.getAttribute('data-site-id');
  // Installs `f` as every method and answers the calls queued so far with it.
  var set = (f) => {
    names.map((n) => api[n] = f(n));
    queue.map((c) => c[2](api[c[0]](...c[1])));
  };
  var get = (u, o) => fetch(base + u, { credentials: 'omit', ...o });
  // A version 4 UUID; the short form where randomUUID is missing (plain http).
  var uuid = () => crypto.randomUUID ? crypto.randomUUID() : '10000000-1000-4000-8000-100000000000'.replace(/[018]/g, (c) =>
    (c ^ crypto.getRandomValues(new Uint8Array(1))[0] & 15 >> c / 4).toString(16));
  // Until the SDK is there, every method answers with a Promise of its result.
  names.map((n) => api[n] = (...a) => {
    if (n == 'init' && a[0]) site = site || a[0].siteId;
    return new Promise((ok) => queue.push([n, a, ok]));
  });
  w.Postern = api;
  var load = () => import(base + '/p/@GLUE@').then((m) => m.default({ module_or_path: base + '/p/@WASM@' }).then(() => {
    // The SDK must never break the host page: its errors are logged, not thrown.
    set((n) => (o) => {
      try {
        return n == 'init' ? m.init({ endpoint: base, ...o }) : m[n]();
      } catch (e) {
        console.warn(e);
      }
    });
    api.loaded = 1;
  })).catch((e) => {
    console.warn('Postern: the SDK could not load', e);
    // A blocker that stops the SDK's own files (the loader ran, the next file
    // failed) would otherwise go unseen: when the collector still answers a
    // fresh request, say so with an `sdk_blocked` event.
    var n = uuid().slice(24);
    get('/p/echo.js?n=' + n, { cache: 'no-store' }).then((r) => r.text()).then((t) => {
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
    }).catch(() => { /* the collector is unreachable too: nothing to tell */ });
    // Not loaded: answer as an undecided check, which never shows a wall,
    // rather than leave callers waiting.
    set((n) => async () => n == 'check' ? { blocked: false, blockerType: 'unknown' } : undefined);
  });
  // Nothing is fetched before the page's own `load`: the SDK never competes with it.
  if (document.readyState == 'complete') load(); else w.addEventListener('load', load);
  if (site) api.init({ siteId: site, keepUtm: me.hasAttribute('data-keep-utm') });
})(window, document.currentScript);
