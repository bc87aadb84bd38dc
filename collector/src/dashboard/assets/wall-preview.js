// The wall preview page: the real SDK (loaded from /p/v1.js just before this
// file) pointed at this page's sandbox, which answers with the unsaved draft.
"use strict";
(function () {
  const d = document.body.dataset;
  window.Postern.init({ siteId: d.siteId, endpoint: location.origin + d.endpoint, variant: d.variant });
  window.Postern.forceDisplay();
})();
