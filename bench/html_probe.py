"""The layout checks of ``bench/html_check.py`` that run in the browser (check 6).

:data:`LAYOUT_PROBE` is a script added to a copy of the page; once the page has loaded it
measures, as Chromium laid the page out at the window's width:

- **horizontal scrolling**: the document wider than the window
  (``documentElement.scrollWidth > clientWidth``), or an element that scrolls sideways
  (``overflow-x`` auto or scroll) whose content is wider than its box;
- **tall table rows**: a ``<tr>`` taller than :data:`MAX_ROW_PX`;
- **clipped text**: a line box of visible text that reaches outside an ancestor whose
  overflow is not ``visible`` (hidden, clip, auto, scroll: the text is cut or scrolled
  away), or off the left or top of the page;
- **small text**: visible text whose computed font size is below :data:`MIN_FONT_PX`.

It writes what it found to ``data-layout`` on ``<body>`` (JSON, at most 10 examples per
kind), which ``--dump-dom`` prints; :func:`layout_findings` reads it back.
"""

from __future__ import annotations

import html
import json
import re

MAX_ROW_PX = 600
"""Tallest table row (CSS pixels) the check lets pass."""

MIN_FONT_PX = 10
"""Smallest font size (CSS pixels) of visible text the check lets pass."""

LAYOUT_PROBE = """<script>
(function () {
  function sample(text) { return (text || "").trim().replace(/\\s+/g, " ").slice(0, 60); }
  function visibleTexts() {
    var out = [], walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    var node;
    while ((node = walker.nextNode())) {
      var parent = node.parentElement;
      if (!parent || !node.textContent.trim() || parent.closest("script, style, head")) {
        continue;
      }
      var style = getComputedStyle(parent);
      if (style.visibility === "hidden" || style.display === "none") { continue; }
      out.push({node: node, parent: parent, style: style});
    }
    return out;
  }
  function scrolling() {
    var root = document.documentElement, out = [];
    if (root.scrollWidth > root.clientWidth + 1) {
      out.push(["the page", root.scrollWidth, root.clientWidth]);
    }
    Array.prototype.forEach.call(document.querySelectorAll("body *"), function (el) {
      var ox = getComputedStyle(el).overflowX;
      if ((ox === "auto" || ox === "scroll") && el.scrollWidth > el.clientWidth + 1) {
        out.push([el.tagName.toLowerCase() + ": " + sample(el.innerText), el.scrollWidth,
                  el.clientWidth]);
      }
    });
    return out;
  }
  function tallRows() {
    var out = [];
    Array.prototype.forEach.call(document.querySelectorAll("tr"), function (tr) {
      var h = tr.getBoundingClientRect().height;
      if (h > MAX_ROW_PX) { out.push([Math.round(h), sample(tr.innerText)]); }
    });
    return out;
  }
  function clipper(el) {
    for (var a = el; a && a !== document.documentElement; a = a.parentElement) {
      var s = getComputedStyle(a);
      if (s.overflowX !== "visible" || s.overflowY !== "visible") {
        if (a !== document.body) { return a; }
      }
    }
    return null;
  }
  function clipped(texts) {
    var out = [], range = document.createRange();
    texts.forEach(function (t) {
      var box = clipper(t.parent);
      var outer = box ? box.getBoundingClientRect() : null;
      range.selectNodeContents(t.node);
      var rects = range.getClientRects();
      for (var i = 0; i < rects.length; i++) {
        var r = rects[i];
        if (r.width < 0.5 || r.height < 0.5) { continue; }
        var off = r.left + scrollX < -1 || r.top + scrollY < -1;
        var cut = outer && (r.left < outer.left - 1 || r.right > outer.right + 1 ||
                            r.top < outer.top - 1 || r.bottom > outer.bottom + 1);
        if (off || cut) {
          out.push([sample(t.node.textContent), off ? "the page" :
                    box.tagName.toLowerCase() + (box.className ? "." + box.className : "")]);
          break;
        }
      }
    });
    return out;
  }
  function smallText(texts) {
    var out = [];
    texts.forEach(function (t) {
      var size = parseFloat(t.style.fontSize);
      if (size < MIN_FONT_PX) { out.push([size, sample(t.node.textContent)]); }
    });
    return out;
  }
  window.addEventListener("load", function () {
    var texts = visibleTexts();
    var found = {scrolling: scrolling(), tall_rows: tallRows(), clipped: clipped(texts),
                 small_text: smallText(texts)};
    var counts = {}, shown = {};
    Object.keys(found).forEach(function (k) {
      counts[k] = found[k].length; shown[k] = found[k].slice(0, 10);
    });
    document.body.setAttribute("data-layout", JSON.stringify({counts: counts, shown: shown,
                                                              texts: texts.length}));
  });
})();
</script>""".replace("MAX_ROW_PX", str(MAX_ROW_PX)).replace("MIN_FONT_PX", str(MIN_FONT_PX))

LAYOUT_CHECKS = ("scrolling", "tall_rows", "clipped", "small_text")
"""The kinds of finding of :data:`LAYOUT_PROBE`, in the order they are printed."""


def layout_findings(dom: str) -> tuple[dict[str, int], list[str]]:
    """The probe's findings in ``dom`` (``chromium --dump-dom`` of a page with
    :data:`LAYOUT_PROBE`): the count of each kind, and one problem line per kind found (with
    examples). A page without the probe's attribute gives one problem."""
    match = re.search(r'data-layout="([^"]*)"', dom)
    if not match:
        return {}, ["chromium --dump-dom gave no layout measurements"]
    data = json.loads(html.unescape(match.group(1)))
    counts, shown = data["counts"], data["shown"]
    problems = []
    if counts["scrolling"]:
        examples = "; ".join(f"{what!r}: {wide} px of content in {box} px"
                             for what, wide, box in shown["scrolling"][:3])
        problems.append(f"horizontal scrolling: {examples}")
    if counts["tall_rows"]:
        examples = "; ".join(f"{h} px: {text!r}" for h, text in shown["tall_rows"][:3])
        problems.append(f"{counts['tall_rows']} table rows taller than {MAX_ROW_PX} px: "
                        f"{examples}")
    if counts["clipped"]:
        examples = "; ".join(f"{text!r} cut by {box}" for text, box in shown["clipped"][:3])
        problems.append(f"{counts['clipped']} texts clipped by their container: {examples}")
    if counts["small_text"]:
        examples = "; ".join(f"{size:g} px: {text!r}" for size, text in shown["small_text"][:3])
        problems.append(f"{counts['small_text']} texts smaller than {MIN_FONT_PX} px: "
                        f"{examples}")
    return {kind: counts[kind] for kind in LAYOUT_CHECKS}, problems
