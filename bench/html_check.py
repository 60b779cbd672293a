"""Check that an HTML report of ``recovery analyze`` renders in a real browser.

Run: ``.venv/bin/python bench/html_check.py REPORT.html [--screenshot OUT.png]``, or
``.venv/bin/python bench/html_check.py --reports FOLDER`` (build and check the demo, seven-run,
six-long-names and four-runs-by-env reports, :mod:`bench.html_reports`).

Six checks, each printed; the exit status is 1 when one fails (2 when no Chromium is found):

1. **self-contained**: every ``<img>`` is a ``data:image/png`` URI that decodes to an image
   (with Pillow), and nothing is loaded from elsewhere (no ``src``/``href`` to a URL or file,
   no external style sheet or script);
2. **decoded in the browser**: headless Chromium loads a copy of the page with a small script
   that counts the images with a non-zero natural width once the page has loaded, and
   ``--dump-dom`` reports the count, which must equal the number of images;
3. **the sections a reader needs**: the same script measures, as laid out by the browser, the
   sections ``headline`` (text), ``data-quality`` (a table) and ``difference-surface`` (a
   decoded image of a difference surface; ``--one-run`` for a report of one run, which has
   none): each must be there, take up room on the page and hold what it should;
4. **not blank**: a headless Chromium screenshot (``--window-size``, default 1400x4000) shows
   enough non-white pixels and colours;
5. **no text overlaps on the page**: the same script takes the line boxes of every visible
   text node (``Range.getClientRects``) and the box of every image, as the browser laid them
   out at ``--window-size``, and no two of different nodes may overlap;
6. **readable at the window's width** (:mod:`bench.html_probe`): no horizontal scrolling
   (the page or a scrolling element wider than its box), no table row taller than 600 px,
   no text cut by a container whose overflow is not visible (or off the page), no visible
   text smaller than 10 px.

A section is found by its ``id`` or, in a grouped report (``--by``), by the first id that
ends with ``-<id>``.

``--reports FOLDER`` builds and checks the reports a reader meets
(:func:`bench.html_reports.check_reports`): besides checks 1-6 on each page it checks, in
Python, that every figure of each report has no overlapping texts and none off the image
(:func:`analyses.report.plot_layout.layout_problems`: a legend cut by its figure is a text off the
image), and that each comparison has its "change of S(T) at every T" figure.

Chromium is the Debian package ``chromium`` (``apt-get install -y chromium``); it runs with
``--headless --no-sandbox --disable-gpu`` and a fresh profile directory, and no network.
"""

from __future__ import annotations

import argparse
import base64
import io
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from bench.html_probe import LAYOUT_CHECKS, LAYOUT_PROBE, layout_findings  # noqa: E402

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars",
)
MIN_INK = 0.02
"""Smallest share of non-white pixels in the screenshot for the page not to count as blank."""
MIN_COLOURS = 16
"""Fewest distinct colours in the screenshot (a page of plots has hundreds)."""

SECTIONS = ("headline", "data-quality", "difference-surface")
"""The report's sections that check 3 looks for, by their HTML ``id``."""

_PROBE = """<script>
function reportSection(id) {
  var el = document.getElementById(id);
  if (el) { return el; }
  var all = document.querySelectorAll("[id$='-" + id + "']");
  return all.length ? all[0] : null;
}
function textOverlaps() {
  // Every visible text node's line boxes and every image's box, in page coordinates; the
  // pairs of different items whose boxes overlap by more than a pixel both ways.
  var boxes = [];
  var walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  var range = document.createRange();
  var node, item = 0;
  while ((node = walker.nextNode())) {
    var parent = node.parentElement;
    if (!parent || !node.textContent.trim() || parent.closest("script, style")) { continue; }
    var style = getComputedStyle(parent);
    if (style.visibility === "hidden" || style.display === "none") { continue; }
    range.selectNodeContents(node);
    var rects = range.getClientRects();
    item += 1;
    for (var i = 0; i < rects.length; i++) {
      var r = rects[i];
      if (r.width > 0.5 && r.height > 0.5) {
        boxes.push({item: item, text: node.textContent.trim().slice(0, 40),
                    x0: r.left + scrollX, x1: r.right + scrollX,
                    y0: r.top + scrollY, y1: r.bottom + scrollY});
      }
    }
  }
  Array.prototype.forEach.call(document.images, function (img) {
    var r = img.getBoundingClientRect();
    item += 1;
    boxes.push({item: item, text: "[image: " + img.alt.slice(0, 40) + "]",
                x0: r.left + scrollX, x1: r.right + scrollX,
                y0: r.top + scrollY, y1: r.bottom + scrollY});
  });
  boxes.sort(function (a, b) { return a.y0 - b.y0; });
  var pairs = [];
  for (var a = 0; a < boxes.length; a++) {
    for (var b = a + 1; b < boxes.length && boxes[b].y0 < boxes[a].y1 - 1; b++) {
      var p = boxes[a], q = boxes[b];
      if (p.item === q.item) { continue; }
      var dx = Math.min(p.x1, q.x1) - Math.max(p.x0, q.x0);
      var dy = Math.min(p.y1, q.y1) - Math.max(p.y0, q.y0);
      if (dx > 1 && dy > 1) { pairs.push([p.text, q.text]); }
    }
  }
  return {n_boxes: boxes.length, pairs: pairs};
}
window.addEventListener("load", function () {
  var imgs = Array.prototype.slice.call(document.images);
  var ok = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length;
  document.body.setAttribute("data-images-total", String(imgs.length));
  document.body.setAttribute("data-images-decoded", String(ok));
  var found = [];
  [SECTION_IDS].forEach(function (id) {
    var el = reportSection(id);
    if (!el) { found.push(id + ":missing"); return; }
    var box = el.getBoundingClientRect();
    var surfaces = Array.prototype.filter.call(el.querySelectorAll("img"), function (i) {
      return i.alt.indexOf("difference") >= 0 && i.complete && i.naturalWidth > 0;
    }).length;
    found.push([id, Math.round(box.height), el.querySelectorAll("table").length, surfaces,
                (el.innerText || "").trim().length].join(":"));
  });
  document.body.setAttribute("data-sections", found.join(";"));
  var overlaps = textOverlaps();
  document.body.setAttribute("data-text-boxes", String(overlaps.n_boxes));
  document.body.setAttribute("data-text-overlaps", JSON.stringify(overlaps.pairs.slice(0, 20)));
  document.body.setAttribute("data-text-overlap-count", String(overlaps.pairs.length));
});
</script>""".replace("SECTION_IDS", ", ".join(f'"{name}"' for name in SECTIONS))


@dataclass
class HtmlCheck:
    """The outcome of :func:`check_html`.

    Attributes:
        n_images: ``<img>`` elements in the page.
        n_images_decoded_pil: Those whose data URI decodes with Pillow.
        n_images_decoded_browser: Those Chromium decoded (``-1`` when not checked).
        sections: Section id -> what the browser found in it: ``height`` (pixels),
            ``tables``, ``surfaces`` (decoded difference-surface images), ``text``
            (characters); absent when the section is missing.
        ink: Share of non-white pixels in the screenshot.
        n_colours: Distinct colours in the screenshot.
        screenshot: The screenshot's path.
        n_text_boxes: Text line boxes and images the browser laid out (``-1``: not checked).
        text_overlaps: Pairs of texts (or images) whose boxes overlap on the page (at most
            20 shown; :attr:`problems` counts them all).
        layout: Check 6: findings of each kind of :data:`bench.html_probe.LAYOUT_CHECKS`
            (empty when not measured).
        problems: What is wrong; empty when the page passes.
    """

    n_images: int = 0
    n_images_decoded_pil: int = 0
    n_images_decoded_browser: int = -1
    sections: dict[str, dict[str, int]] = field(default_factory=dict)
    ink: float = 0.0
    n_colours: int = 0
    screenshot: Path | None = None
    n_text_boxes: int = -1
    text_overlaps: list[tuple[str, str]] = field(default_factory=list)
    layout: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no check failed."""
        return not self.problems


class _Resources(HTMLParser):
    """Collects image sources and every reference to something outside the page."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.external: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "img":
            self.images.append(values.get("src") or "")
        for name in ("src", "href"):
            ref = values.get(name)
            if ref and not ref.startswith(("data:", "#")):
                self.external.append(f"<{tag} {name}={ref[:80]!r}>")


def find_chromium() -> str | None:
    """Path of a Chromium/Chrome executable, or None."""
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def _chromium(chromium: str, args: list[str], timeout: float) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="html-check-profile-") as profile:
        return subprocess.run(
            [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True, text=True, timeout=timeout, check=False,
        )


def check_html(
    path: str | Path,
    screenshot: str | Path,
    *,
    chromium: str | None = None,
    window_size: str = "1400,4000",
    timeout: float = 120.0,
    one_run: bool = False,
) -> HtmlCheck:
    """Run checks 1-6 of the module docstring on one HTML file.

    Args:
        path: The HTML file.
        screenshot: Where to write the PNG screenshot.
        chromium: The browser executable (default: :func:`find_chromium`).
        window_size: ``WIDTH,HEIGHT`` of the headless window.
        timeout: Seconds allowed per browser run.
        one_run: The report has one run: its difference-surface section holds no surface.

    Returns:
        The :class:`HtmlCheck`.

    Raises:
        FileNotFoundError: when no Chromium is found.
    """
    import numpy as np
    from PIL import Image

    path = Path(path).resolve()
    screenshot = Path(screenshot).resolve()
    chromium = chromium or find_chromium()
    if chromium is None:
        raise FileNotFoundError("no chromium found (apt-get install -y chromium)")
    result = HtmlCheck(screenshot=screenshot)
    text = path.read_text(encoding="utf-8")

    parser = _Resources()
    parser.feed(text)
    result.n_images = len(parser.images)
    if parser.external:
        result.problems.append(f"external resources: {', '.join(parser.external[:5])}")
    if re.search(r"@import|url\(\s*['\"]?(?!data:)", text):
        result.problems.append("the style sheet loads something from outside the page")
    for index, src in enumerate(parser.images):
        match = re.match(r"data:image/png;base64,(.*)", src, re.S)
        if not match:
            result.problems.append(f"image {index} is not an embedded PNG: {src[:60]!r}")
            continue
        try:
            with Image.open(io.BytesIO(base64.b64decode(match.group(1), validate=True))) as im:
                im.load()
                if im.width < 10 or im.height < 10:
                    raise ValueError(f"{im.width}x{im.height} pixels")
            result.n_images_decoded_pil += 1
        except Exception as err:  # any decoding failure is a finding, not a crash
            result.problems.append(f"image {index} does not decode: {err}")

    with tempfile.TemporaryDirectory(prefix="html-check-") as tmp:
        probe = Path(tmp) / "probe.html"
        probe.write_text(text.replace("</body>", _PROBE + LAYOUT_PROBE + "</body>", 1),
                         encoding="utf-8")
        run = _chromium(chromium, ["--virtual-time-budget=10000", "--dump-dom",
                                   f"--window-size={window_size}", probe.as_uri()], timeout)
        total = re.search(r'data-images-total="(\d+)"', run.stdout)
        decoded = re.search(r'data-images-decoded="(\d+)"', run.stdout)
        if not (total and decoded):
            result.problems.append(
                f"chromium --dump-dom gave no image count (exit {run.returncode}): "
                f"{run.stderr.strip()[-300:]}"
            )
        else:
            result.n_images_decoded_browser = int(decoded.group(1))
            if int(total.group(1)) != result.n_images or result.n_images_decoded_browser != \
                    result.n_images:
                result.problems.append(
                    f"chromium decoded {decoded.group(1)} of {total.group(1)} images "
                    f"({result.n_images} in the file)"
                )
        result.sections = _sections(run.stdout)
        result.problems.extend(_section_problems(result.sections, one_run))
        _text_overlap_findings(run.stdout, result)
        result.layout, problems = layout_findings(run.stdout)
        result.problems.extend(problems)

    screenshot.parent.mkdir(parents=True, exist_ok=True)
    screenshot.unlink(missing_ok=True)
    run = _chromium(chromium, [f"--screenshot={screenshot}", f"--window-size={window_size}",
                               "--virtual-time-budget=10000", path.as_uri()], timeout)
    if not screenshot.exists():
        result.problems.append(
            f"chromium wrote no screenshot (exit {run.returncode}): {run.stderr.strip()[-300:]}"
        )
        return result
    with Image.open(screenshot) as im:
        rgb = np.asarray(im.convert("RGB"))
    result.ink = float((rgb.min(axis=2) < 245).mean()) if rgb.size else 0.0
    result.n_colours = len(np.unique(rgb.reshape(-1, 3), axis=0))
    if result.ink < MIN_INK:
        result.problems.append(f"screenshot looks blank: {result.ink:.2%} non-white pixels")
    if result.n_colours < MIN_COLOURS:
        result.problems.append(f"screenshot has only {result.n_colours} colours")
    return result


def _text_overlap_findings(dom: str, result: HtmlCheck) -> None:
    """Check 5 from the probe's attributes: no two texts (or images) overlap on the page."""
    import html
    import json

    boxes = re.search(r'data-text-boxes="(\d+)"', dom)
    count = re.search(r'data-text-overlap-count="(\d+)"', dom)
    pairs = re.search(r'data-text-overlaps="([^"]*)"', dom)
    if not (boxes and count and pairs):
        result.problems.append("chromium --dump-dom gave no text boxes")
        return
    result.n_text_boxes = int(boxes.group(1))
    result.text_overlaps = [tuple(p) for p in json.loads(html.unescape(pairs.group(1)))]
    if int(count.group(1)):
        shown = "; ".join(f"{a!r} / {b!r}" for a, b in result.text_overlaps[:5])
        result.problems.append(f"{count.group(1)} pairs of texts overlap on the page: {shown}")


def _sections(dom: str) -> dict[str, dict[str, int]]:
    """The probe's ``data-sections`` attribute, parsed."""
    match = re.search(r'data-sections="([^"]*)"', dom)
    out: dict[str, dict[str, int]] = {}
    for item in (match.group(1).split(";") if match else []):
        parts = item.split(":")
        if len(parts) == 5:
            out[parts[0]] = dict(zip(("height", "tables", "surfaces", "text"),
                                     map(int, parts[1:]), strict=True))
    return out


def _section_problems(sections: dict[str, dict[str, int]], one_run: bool) -> list[str]:
    """What check 3 finds wrong with the measured sections."""
    problems = []
    for name in SECTIONS:
        found = sections.get(name)
        if found is None:
            problems.append(f"section {name!r} is missing")
            continue
        if found["height"] < 20 or found["text"] < 20:
            problems.append(f"section {name!r} is empty on the page: {found}")
    if "data-quality" in sections and sections["data-quality"]["tables"] < 1:
        problems.append("section 'data-quality' has no table")
    if "difference-surface" in sections and not one_run and \
            sections["difference-surface"]["surfaces"] < 1:
        problems.append("section 'difference-surface' shows no decoded difference surface")
    return problems


def _print_check(result: HtmlCheck) -> None:
    print(f"images: {result.n_images} (decoded by Pillow: {result.n_images_decoded_pil}, "
          f"by chromium: {result.n_images_decoded_browser})")
    for name in SECTIONS:
        found = result.sections.get(name)
        print(f"section {name}: " + ("missing" if found is None else
              f"{found['height']} px high, {found['text']} characters, {found['tables']} "
              f"tables, {found['surfaces']} difference surfaces"))
    print(f"text on the page: {result.n_text_boxes} boxes, "
          f"{len(result.text_overlaps)} overlapping pairs")
    print("layout at the window's width: " + (", ".join(
        f"{kind.replace('_', ' ')} {result.layout[kind]}" for kind in LAYOUT_CHECKS)
        if result.layout else "not measured"))
    print(f"screenshot: {result.screenshot} ({result.ink:.1%} non-white pixels, "
          f"{result.n_colours} colours)")
    for problem in result.problems:
        print(f"PROBLEM: {problem}")
    print("OK" if result.ok else "FAILED")


def main(argv: list[str] | None = None) -> int:
    """Command line: check one HTML file (or, ``--reports FOLDER``, build and check the
    reports of :mod:`bench.html_reports`); print the findings; 0 = fine, 1 = problems, 2 = no
    Chromium."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("html", type=Path, nargs="?", help="The HTML report.")
    parser.add_argument("--screenshot", type=Path, default=None,
                        help="PNG to write (default: next to the HTML, .png).")
    parser.add_argument("--chromium", default=None, help="Browser executable.")
    parser.add_argument("--window-size", default="1400,4000", help="WIDTH,HEIGHT.")
    parser.add_argument("--one-run", action="store_true",
                        help="A report of one run: no difference surface is expected.")
    parser.add_argument("--reports", type=Path, default=None, metavar="FOLDER",
                        help="Build the demo, seven-run, six-long-names and four-runs-by-env "
                             "reports in FOLDER and check them and every figure they draw.")
    parser.add_argument("--n-boot", type=int, default=50, help="--reports: bootstraps.")
    parser.add_argument("--demo-tasks", type=int, default=None,
                        help="--reports: tasks of the demo (default: the demo's 200).")
    args = parser.parse_args(argv)
    if (args.html is None) == (args.reports is None):
        parser.error("give an HTML file or --reports FOLDER")
    if find_chromium() is None and args.chromium is None:
        print("html_check: no chromium found (apt-get install -y chromium)", file=sys.stderr)
        return 2
    if args.reports is not None:
        from bench.html_reports import check_reports

        results = check_reports(args.reports, check_html, n_boot=args.n_boot,
                                demo_tasks=args.demo_tasks, chromium=args.chromium,
                                window_size=args.window_size)
        for name, result in results.items():
            print(f"== {name}")
            _print_check(result)
        return 0 if all(r.ok for r in results.values()) else 1
    shot = args.screenshot or args.html.with_suffix(".png")
    result = check_html(args.html, shot, chromium=args.chromium,
                        window_size=args.window_size, one_run=args.one_run)
    _print_check(result)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
