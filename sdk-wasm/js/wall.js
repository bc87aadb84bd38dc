// Postern's wall: the markup, styles, texts and focus trap of the dialog a
// blocked visitor sees, as a module of its own that only blocked visitors
// (and `forceDisplay()`) download. Whether and which wall to show is decided
// by the SDK (the wall's wasm, which this module carries): its kind, its
// variant, which allow-listing steps, what each control does. This module
// draws it with the variant's and the site's texts (what they leave out takes
// the defaults), link and colours, and hands every click back.
//
// Safe under a strict CSP and Trusted Types: no markup is parsed (nodes are
// built with createElement and textContent, so the site's texts stay text),
// the styles are a constructed stylesheet (CSP's `style-src` does not apply
// to it) and the colours are set through CSSOM.

const TITLE = 'Please allow this site';
const BODY = 'We rely on advertising to keep this site free. Please allow it in your ad blocker.';
const SUBSCRIBE = 'Subscribe instead';
const ALLOWED = 'I have allowed this site';

/** The allow-listing steps for each kind of blocker. */
const STEPS = {
  extension: [
    'Click your ad blocker\u2019s icon next to the address bar (uBlock Origin, Adblock Plus, AdGuard, Ghostery\u2026).',
    'Turn it off for this site: the power button, or \u201cDon\u2019t run on pages on this site\u201d.',
  ],
  network: [
    'A request filter blocks ads here: an extension such as uBlock Origin Lite, or your browser\u2019s own blocker.',
    'uBlock Origin Lite: click its icon and set this site to \u201cno filtering\u201d. Brave: click the shield icon and turn the shields down for this site. Opera: click the shield icon in the address bar and turn off ad blocking for this site.',
  ],
  browser: [
    'Your browser blocks ads by itself (for example Brave Shields).',
    'Click the shield icon in the address bar and turn the shields down for this site.',
  ],
  unknown: [
    'Open your ad blocker, or your browser\u2019s privacy settings.',
    'Allow this site, or pause blocking for it.',
  ],
};

/** The lines the SDK may show under the texts, by the name it gives. */
const NOTES = {
  checking: 'Checking\u2026',
  blocked: 'Your blocker still blocks this site. Follow the steps, then try again.',
  failed: 'We could not check just now. Please try again.',
};

// The site's colours override the defaults (the dashboard's) on the overlay.
const CSS = `:host{all:initial}
.o{--b:#ffffff;--t:#1a1a1a;--a:#0b57d0;position:fixed;inset:0;z-index:2147483647;background:rgba(17,24,39,.75);display:flex;align-items:center;justify-content:center;padding:16px;box-sizing:border-box;font:16px/1.5 system-ui,-apple-system,Segoe UI,sans-serif;color:var(--t)}
.o.b{top:auto;background:none;padding:0}
.d{background:var(--b);border-radius:12px;max-width:34rem;width:100%;max-height:100%;overflow:auto;padding:24px;box-sizing:border-box;box-shadow:0 10px 40px rgba(0,0,0,.35)}
.b .d{max-width:none;border-radius:0;padding:12px 16px;border-top:3px solid var(--a)}
h2{font-size:1.35em;line-height:1.25;margin:0 0 8px}
p,ol{margin:0 0 12px}
ol{padding-left:1.3em}
button,a{font:inherit;cursor:pointer;border-radius:8px;padding:10px 16px;margin:4px 8px 4px 0;border:1px solid;background:var(--b);color:inherit;text-decoration:none;display:inline-block}
.p{background:var(--a);border-color:var(--a);color:#fff}
#n:empty{display:none}
#n{color:#b91c1c;font-weight:600}
[hidden]{display:none!important}
:focus-visible{outline:3px solid #f59e0b;outline-offset:2px}`;

/** A string of the site's config, or '' for anything else. */
const str = (v) => (typeof v == 'string' ? v : '');

/** Only `#rrggbb`: anything else (a name, `url()`, an escape attempt) takes the default. */
const hex = (v) => /^#[0-9a-f]{6}$/i.test(str(v));

/** Only web links: a site's config must not be able to plant `javascript:`. */
const webLink = (v) => /^(https?:\/\/|\/(?!\/))/.test(v);

// The wall's wasm, one character per byte: the wall's behaviour (which wall,
// which variant, what each control does), Rust compiled with the SDK and
// split from its wasm; scripts/build-sdk writes it here (sdk-wasm/tools/embed-wasm.js).
const WASM = '@WALL_WASM@';

/**
 * Instantiates the wall's wasm into the SDK's memory and function table (`x`:
 * the SDK wasm's exports). The SDK shows a wall only once this has resolved.
 */
export const load = (x) => WebAssembly.instantiate(Uint8Array.from(WASM, (c) => c.charCodeAt(0)), { '': x });

/**
 * Shows the wall. `o`: `{kind: 'hard'|'soft'|'banner', steps: 'extension'|'network'|'browser'|'unknown',
 * variant, wall}`: the chosen variant (`title`, `body`, `subscribe_url`, `subscribe_text`) and the
 * site's `wall` (its `subscribe_url`, `subscribe_text` and `colors`) as the config has them. `send` receives
 * `{type: 'wall', a}` for each control used (`recheck`, `help`, `subscribe`, `dismiss`).
 * Returns the wall's handle: `note(name)`, `help()` (true when the steps were just
 * opened), `reveal()` (the dismiss button), `close()`; undefined when the page refused it
 * (a DOM call threw, e.g. no body yet): no wall. Caught here, not by the SDK: a
 * throwing import costs the SDK's glue and wasm an exception path.
 */
export function show(o, send) {
  try {
    return draw(o, send);
  } catch {
    // No wall: the SDK carries on without one.
  }
}

function draw(o, send) {
  const doc = document;
  const html = doc.documentElement;
  const banner = o.kind == 'banner';
  const variant = o.variant || {};
  const site = o.wall || {};
  const text = (k) => str(variant[k]) || str(site[k]);
  const url = text('subscribe_url');
  const node = (parent, tag, attrs, text) => {
    const e = doc.createElement(tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text) e.textContent = text;
    parent.appendChild(e);
    return e;
  };
  const host = doc.createElement('div');
  host.setAttribute('data-postern-wall', '');
  const root = host.attachShadow({ mode: 'closed' });
  try {
    const sheet = new CSSStyleSheet();
    sheet.replaceSync(CSS);
    root.adoptedStyleSheets = [sheet];
  } catch {
    // Browsers without constructable stylesheets (before Safari 16.4).
    node(root, 'style', {}, CSS);
  }
  const overlay = node(root, 'div', { class: banner ? 'o b' : 'o' });
  const colors = site.colors || {};
  for (const [k, v] of [['--b', colors.background], ['--t', colors.text], ['--a', colors.accent]]) {
    if (hex(v)) overlay.style.setProperty(k, v);
  }
  const d = node(overlay, 'div', {
    class: 'd', role: 'dialog', 'aria-modal': String(!banner), 'aria-labelledby': 't', 'aria-describedby': 'm',
  });
  node(d, 'h2', { id: 't' }, str(variant.title) || TITLE);
  node(d, 'p', { id: 'm' }, str(variant.body) || BODY);
  const steps = node(d, 'ol', { id: 'h', hidden: '' });
  for (const s of STEPS[o.steps] || STEPS.unknown) node(steps, 'li', {}, s);
  node(steps, 'li', {}, `Then click \u201c${ALLOWED}\u201d.`);
  const note = node(d, 'p', { id: 'n', role: 'status', 'aria-live': 'polite' });
  const recheck = node(d, 'button', { class: 'p', 'data-a': 'recheck' }, ALLOWED);
  const help = node(d, 'button', { 'data-a': 'help', 'aria-expanded': 'false', 'aria-controls': 'h' }, 'How do I allow this site?');
  if (webLink(url)) node(d, 'a', { 'data-a': 'subscribe', href: url }, text('subscribe_text') || SUBSCRIBE);
  const dismiss = o.kind != 'hard' && node(d, 'button', { 'data-a': 'dismiss', hidden: '' }, 'Continue without allowing');

  root.addEventListener('click', (e) => {
    const control = e.target.closest('[data-a]');
    if (control) send({ type: 'wall', a: control.dataset.a });
  });
  // A key anywhere on the page while the wall is up: Escape dismisses a wall
  // that may be dismissed; Tab and Shift+Tab cycle through a modal's controls.
  const onKey = (e) => {
    if (e.key == 'Escape' && dismiss && !dismiss.hidden) {
      e.preventDefault();
      send({ type: 'wall', a: 'dismiss' });
    } else if (e.key == 'Tab' && !banner) {
      const controls = [...root.querySelectorAll('button:not([hidden]),a[href]')];
      const at = controls.indexOf(root.activeElement);
      const last = controls.length - 1;
      const next = e.shiftKey ? (at <= 0 ? last : -1) : (at < 0 || at == last ? 0 : -1);
      if (next >= 0) {
        e.preventDefault();
        controls[next].focus();
      }
    }
  };
  // Appended first: a page without a body yet throws here, before any listener is left behind.
  doc.body.appendChild(host);
  addEventListener('keydown', onKey, true);

  // Scrolling is locked only once the wall is laid out as a fixed overlay: a
  // wall whose styles did not apply must not leave the page stuck.
  let saved = null;
  if (!banner && getComputedStyle(overlay).position == 'fixed') {
    saved = html.style.overflow;
    html.style.overflow = 'hidden';
  }
  if (!banner) recheck.focus();

  return {
    note(name) {
      note.textContent = NOTES[name] || '';
    },
    help() {
      const opening = steps.hidden;
      steps.hidden = !opening;
      help.setAttribute('aria-expanded', String(opening));
      return opening;
    },
    reveal() {
      if (dismiss) dismiss.hidden = false;
    },
    close() {
      removeEventListener('keydown', onKey, true);
      host.remove();
      // An empty value removes the declaration, as the page had it.
      if (saved != null) html.style.overflow = saved;
    },
  };
}
