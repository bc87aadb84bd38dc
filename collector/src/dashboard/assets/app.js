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
