// Small progressive enhancements; every page works without them.
"use strict";
document.addEventListener("click", (event) => {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const field = document.getElementById(button.dataset.copy);
  field.select();
  navigator.clipboard.writeText(field.value).then(
    () => { button.textContent = "Copied"; },
    () => { button.textContent = "Press Ctrl+C to copy"; },
  );
});
document.addEventListener("submit", (event) => {
  const message = event.target.dataset.confirm;
  if (message && !window.confirm(message)) event.preventDefault();
});

// Report forms: "Add recipient" and a Remove button per row. Without script
// the form offers blank rows and more after each save; the rows post the same
// fields either way, so the server sees no difference.
for (const list of document.querySelectorAll("[data-recipients]")) {
  const fieldset = list.closest("fieldset");
  const add = fieldset.querySelector("[data-add-recipient]");
  const max = Number(list.dataset.max);
  const rows = () => [...list.querySelectorAll(".recipient")];
  // Numbers a row's labels, ids and error hints as row `i` (from 0).
  const number = (row, i) => {
    for (const [kind, text] of [["email", "E-mail"], ["role", "Role"]]) {
      const control = row.querySelector(`[name=recipient_${kind}]`);
      const old = control.id;
      const id = `recipient_${kind}_${i}`;
      const label = row.querySelector(`label[for="${old}"]`);
      label.textContent = `${text} of recipient ${i + 1}`;
      label.htmlFor = id;
      const hint = row.querySelector(`[id="${old}-error"]`);
      if (hint) hint.id = `${id}-error`;
      const described = control.getAttribute("aria-describedby");
      if (described) control.setAttribute("aria-describedby", described.replace(`${old}-error`, `${id}-error`));
      control.id = id;
    }
    row.querySelector("[data-remove-recipient] .visually-hidden").textContent = ` recipient ${i + 1}`;
  };
  const update = () => { add.disabled = rows().length >= max; };
  add.addEventListener("click", () => {
    const last = rows().at(-1);
    const row = last.cloneNode(true);
    for (const hint of row.querySelectorAll(".field-error")) hint.remove();
    for (const control of row.querySelectorAll("input, select")) {
      control.removeAttribute("aria-invalid");
      control.removeAttribute("aria-describedby");
    }
    row.querySelector("[name=recipient_email]").value = "";
    row.querySelector("[name=recipient_role]").value = "reader";
    last.after(row);
    number(row, rows().length - 1);
    update();
    row.querySelector("[name=recipient_email]").focus();
  });
  list.addEventListener("click", (event) => {
    const button = event.target.closest("[data-remove-recipient]");
    if (!button) return;
    const row = button.closest(".recipient");
    if (rows().length === 1) {
      // The last row stays, emptied: "Add recipient" copies it.
      row.querySelector("[name=recipient_email]").value = "";
      row.querySelector("[name=recipient_email]").focus();
      return;
    }
    const next = row.nextElementSibling || row.previousElementSibling;
    row.remove();
    rows().forEach(number);
    update();
    next.querySelector("[name=recipient_email]").focus();
  });
  for (const button of fieldset.querySelectorAll("[data-remove-recipient], [data-add-recipient]")) button.hidden = false;
  for (const note of fieldset.querySelectorAll("[data-without-script]")) note.hidden = true;
  update();
}

// Integrations: while a delivery is not tried yet, its log is refreshed from
// the log's JSON every 2 s (for a minute at most). Without script the
// notice's Refresh link does the same.
for (const notice of document.querySelectorAll("[data-queued]")) {
  const section = notice.closest("section");
  let tries = 0;
  const show = (d) => {
    const row = section.querySelector(`tr[data-delivery="${d.id}"]`);
    if (!row) return;
    const [, , state, attempts, answer, error] = row.cells;
    const badge = state.querySelector(".badge");
    badge.className = `badge ${d.state}`;
    badge.textContent = d.state;
    state.replaceChildren(badge, d.retrying ? " (will retry)" : "");
    attempts.textContent = String(d.attempts);
    // A Reader's log has no answer and error columns.
    if (answer) answer.textContent = d.status ? `HTTP ${d.status}${d.latency_ms === null ? "" : ` in ${d.latency_ms} ms`}` : "";
    if (error) error.textContent = d.error || "";
  };
  const poll = async () => {
    tries += 1;
    let log = null;
    try {
      const res = await fetch(notice.dataset.queued, { headers: { accept: "application/json" } });
      // A refusal (signed out, deleted) is not retried: the Refresh link stays.
      if (!res.ok) return;
      log = await res.json();
    } catch {
      // A network hiccup: try again below.
    }
    if (log) {
      log.deliveries.forEach(show);
      if (!log.deliveries.some((d) => d.queued)) {
        notice.textContent = "Sent: the log below shows how it went.";
        return;
      }
    }
    if (tries < 30) setTimeout(poll, 2000);
  };
  setTimeout(poll, 2000);
}
