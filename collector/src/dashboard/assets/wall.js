// The wall editor's live preview. After each edit (debounced) the form goes
// to the preview endpoint, which checks it as saving would and answers with
// the address of a preview page; the frame loads it, and there the real SDK
// shows the draft. Saving stays the form's own POST.
"use strict";
(function () {
  const form = document.getElementById("wall-form");
  const frame = document.getElementById("preview-frame");
  const pick = document.getElementById("preview-variant");
  const status = document.getElementById("preview-status");
  if (!form || !frame || !pick || !status) return;
  const DEBOUNCE_MS = 500;
  const SHOWN = "The preview shows the form as it is now (saved or not).";
  let timer = 0;
  let sent = 0;
  let page = null;
  // The form as last previewed: an edit that changes nothing (typed, then
  // undone) costs no request.
  let previewed = "";
  // The field being edited when the frame reloads: the wall takes the focus
  // when it opens, and typing must not end up in the preview.
  let keep = null;

  function say(text, error) {
    if (status.textContent !== text) status.textContent = text;
    status.classList.toggle("error", error);
  }

  // Every named field, disabled ones too: a Reader's form is disabled but
  // still previewed.
  function fields() {
    const body = new URLSearchParams();
    for (const el of form.elements) {
      if (!el.name || ((el.type === "checkbox" || el.type === "radio") && !el.checked)) continue;
      body.append(el.name, el.value);
    }
    return body;
  }

  function variants(names) {
    const current = pick.value;
    pick.replaceChildren(...names.map((n) => new Option(n, n, false, n === current)));
  }

  function show() {
    if (!page) return;
    const active = document.activeElement;
    keep = active && form.contains(active) ? active : null;
    frame.src = page + (pick.value ? "?variant=" + encodeURIComponent(pick.value) : "");
  }

  async function refresh() {
    const body = fields().toString();
    const mine = ++sent;
    if (body === previewed) {
      say(SHOWN, false);
      return;
    }
    let res, data;
    try {
      res = await fetch(form.dataset.preview, {
        method: "POST", body, headers: { "content-type": "application/x-www-form-urlencoded" }, credentials: "same-origin",
      });
      data = await res.json();
    } catch (e) {
      if (mine === sent) say("The preview could not be updated (" + e.message + ").", true);
      return;
    }
    if (mine !== sent) return;
    if (!res.ok) {
      const message = data && data.error ? data.error.message : "the server answered " + res.status;
      say("Not previewed: " + message, true);
      return;
    }
    previewed = body;
    page = data.url;
    variants(data.variants);
    show();
    say(SHOWN, false);
  }

  function edited() {
    clearTimeout(timer);
    timer = setTimeout(refresh, DEBOUNCE_MS);
  }

  form.addEventListener("input", edited);
  form.addEventListener("change", edited);
  pick.addEventListener("change", show);
  // Tabbing or clicking into the preview is the user's choice: leave it there.
  document.addEventListener("keydown", (e) => { if (e.key === "Tab") keep = null; });
  frame.addEventListener("load", () => {
    const doc = frame.contentDocument;
    if (doc) doc.addEventListener("pointerdown", () => { keep = null; }, true);
  });
  window.addEventListener("blur", () => {
    setTimeout(() => {
      if (keep && document.activeElement === frame) keep.focus();
    }, 0);
  });
  refresh();
})();
