// gradetrail view: progressive enhancement only; every page works without this file.
"use strict";

// A run still being written: its summary, the rows it counts and the rows per state
// become the figures of the rows written so far (text only, never markup).
function showPartial(partial, expected) {
  const table = document.querySelector("table.summary-lines");
  if (table) {
    table.replaceChildren(...partial.lines.map(([label, text]) => {
      const row = document.createElement("tr");
      const th = document.createElement("th");
      const td = document.createElement("td");
      th.textContent = label;
      td.textContent = text;
      row.append(th, td);
      return row;
    }));
  }
  document.querySelectorAll("p.counting").forEach((el) => {
    el.classList.remove("counting");
    el.textContent = "The figures below are partial, from the ";
    const rows = document.createElement("span");
    rows.className = "partial-rows";
    el.append(rows, " rows written so far (of " + expected.toLocaleString("en-US") + ").");
    const heading = document.querySelector("section.summary h2");
    if (heading && !heading.querySelector(".badge")) {
      const badge = document.createElement("span");
      badge.className = "badge warn";
      badge.textContent = "partial";
      heading.append(" ", badge);
    }
  });
  document.querySelectorAll(".partial-rows").forEach((el) => {
    el.textContent = partial.rows.toLocaleString("en-US");
  });
  Object.entries(partial.counts).forEach(([state, n]) => {
    const cell = document.querySelector('td[data-state="' + state + '"]');
    if (cell) cell.textContent = n.toLocaleString("en-US");
  });
}

// Live progress of a running run: poll its progress URL, fill the bar, reload when done.
function watchProgress(el) {
  const url = el.dataset.progress;
  const bar = el.querySelector(".bar");
  const label = el.querySelector(".label");
  async function tick() {
    let data;
    try {
      const response = await fetch(url, { headers: { Accept: "application/json" } });
      if (!response.ok) return setTimeout(tick, 4000);
      data = await response.json();
    } catch (err) {
      return setTimeout(tick, 4000);
    }
    const expected = data.expected || 0;
    const pct = expected ? Math.min(100, Math.floor((100 * data.rows) / expected)) : 0;
    bar.style.width = pct + "%";
    label.textContent = data.rows + " of " + expected + " rows (" + pct + "%)";
    if (data.partial) showPartial(data.partial, expected);
    if (data.status !== "running") {
      label.textContent = data.status;
      if (el.dataset.reload) window.location.reload();
      return;
    }
    setTimeout(tick, 1500);
  }
  tick();
}

// Runs page: ticking a second run opens the diff (the first ticked is the baseline).
function enhanceDiffForm(form) {
  const order = [];
  const button = form.querySelector("#diff-button");
  const update = () => { if (button) button.disabled = order.length !== 2; };
  form.querySelectorAll('input[type=checkbox][name=run]').forEach((box) => {
    if (box.checked) order.push(box.value);
    box.addEventListener("change", () => {
      const at = order.indexOf(box.value);
      if (box.checked && at < 0) order.push(box.value);
      if (!box.checked && at >= 0) order.splice(at, 1);
      update();
      if (order.length === 2) {
        const params = new URLSearchParams({ a: order[0], b: order[1] });
        showBusy("Computing the diff\u2026");
        window.location.assign("/diff?" + params.toString());
      }
    });
  });
  update();
}

// Sample filters: a ticked box or a new sort applies at once (the Apply button stays).
function autosubmit(form) {
  form.querySelectorAll("input[type=checkbox], select").forEach((input) => {
    input.addEventListener("change", () => form.requestSubmit ? form.requestSubmit() : form.submit());
  });
}

// Sample pages: j or the right arrow opens the next sample of the list, k or the left
// arrow the previous one (the links rel=next / rel=prev of the page), unless a field has
// the focus or a modifier key is held.
function stepKeys(event) {
  if (event.defaultPrevented || event.altKey || event.ctrlKey || event.metaKey || event.shiftKey) return;
  const target = event.target;
  if (target && (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName))) return;
  const rel = { j: "next", ArrowRight: "next", k: "prev", ArrowLeft: "prev" }[event.key];
  if (!rel) return;
  const link = document.querySelector("nav.steps a[rel=" + rel + "], p.nav-line a[rel=" + rel + "]");
  if (!link) return;
  event.preventDefault();
  window.location.assign(link.href);
}

// A diff is computed when first opened (seconds for large runs): say so at once.
function showBusy(text) {
  if (document.querySelector(".busy")) return;
  const banner = document.createElement("div");
  banner.className = "busy";
  banner.setAttribute("role", "status");
  banner.textContent = text;
  document.body.prepend(banner);
}

function diffBusy(event) {
  const link = event.target.closest && event.target.closest('a[href^="/diff?"]');
  if (link && !event.ctrlKey && !event.metaKey && !event.shiftKey && event.button === 0) {
    showBusy("Computing the diff…");
  }
}

document.addEventListener("DOMContentLoaded", () => {
  document.addEventListener("keydown", stepKeys);
  document.addEventListener("click", diffBusy);
  document.addEventListener("submit", (event) => {
    if (new URL(event.target.action, window.location.href).pathname === "/diff") showBusy("Computing the diff\u2026");
  });
  document.querySelectorAll("[data-progress]").forEach(watchProgress);
  const diffForm = document.getElementById("diff-form");
  if (diffForm) enhanceDiffForm(diffForm);
  document.querySelectorAll("form[data-autosubmit]").forEach(autosubmit);
});
