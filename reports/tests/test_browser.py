"""The HTML report in a real browser: headless Debian chromium renders a passing, an
interrupted and an unreachable-target report (synthetic results, no broker).

Checked in the browser, not in the markup: the banner text, no horizontal overflow of
the page at 1280 px, and that the inline SVG charts are laid out with a non-zero size.
A probe script is added to a copy of each page; it writes what the browser measured into
the DOM, which `chromium --dump-dom` prints. Chromium comes from .ci/chromium.sh (apt)
when missing; when it cannot be installed the tests skip with the reason.
"""

from __future__ import annotations

import html as html_lib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from reports import certification as cert
from reports.html_report import write_html
from reports.tests import synthetic as syn

ROOT = Path(__file__).resolve().parents[2]
WIDTH = 1280

PROBE = """<script>
(function () {
  var d = document.documentElement;
  var svgs = Array.prototype.map.call(document.querySelectorAll("svg.chart"), function (s) {
    var r = s.getBoundingClientRect(); return [r.width, r.height, s.querySelectorAll("rect").length];
  });
  var b = document.getElementById("banner");
  var out = {scrollWidth: d.scrollWidth, innerWidth: window.innerWidth, bodyScrollWidth: document.body.scrollWidth,
             banner: b ? b.textContent : null, svgs: svgs};
  var pre = document.createElement("pre"); pre.id = "kc-probe"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


def _find_chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def chromium() -> str:
    found = _find_chromium()
    if found is None:
        script = ROOT / ".ci" / "chromium.sh"
        try:
            p = subprocess.run(["sh", str(script)], capture_output=True, text=True, timeout=900, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            pytest.skip(f"chromium missing and .ci/chromium.sh failed: {exc}")
        found = _find_chromium()
        if found is None:
            pytest.skip(f"chromium missing and could not be installed: {(p.stderr or p.stdout).strip()[-300:]}")
    return found


def _probe_copy(html: Path) -> Path:
    probe = html.with_name("probe-" + html.name)
    probe.write_text(html.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
    return probe


def _launch(browser: str, page: Path, profile: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
         f"--user-data-dir={profile}", f"--window-size={WIDTH},900", "--dump-dom", page.as_uri()],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _probe_result(proc: subprocess.Popen) -> dict:
    try:
        out, err = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    m = re.search(r'<pre id="kc-probe">(.*?)</pre>', out, re.S)
    assert m, f"no probe output from chromium (exit {proc.returncode}): {err[-500:]}"
    return json.loads(html_lib.unescape(m.group(1)))


def _render(tmp: Path, make) -> Path:
    catalog = syn.write_catalog(tmp)
    out = tmp / "out"
    results = make(out)
    rep = cert.build_report_from_dir(results, catalog_path=catalog, register_path=tmp / "none.yaml",
                                     deviations_path=tmp / "none")
    cert.write_json(rep, out / "report.json")
    return write_html(rep, out / "report.html")


REPORTS = {"passing": syn.passing, "interrupted": syn.interrupted, "unreachable": syn.unreachable}


@pytest.fixture(scope="module")
def measured(chromium, tmp_path_factory) -> dict[str, dict]:
    """The three reports, measured by three chromium processes running at once."""
    procs = {}
    for name, make in REPORTS.items():
        tmp = tmp_path_factory.mktemp(name)
        page = _render(tmp, make)
        procs[name] = _launch(chromium, _probe_copy(page), tmp / "profile")
        if name == "passing":  # the probe must see an overflow when there is one
            wide = page.with_name("wide.html")
            wide.write_text(page.read_text().replace("</main>", '<div style="width:2000px">x</div></main>'))
            procs["wide"] = _launch(chromium, _probe_copy(wide), tmp / "profile-wide")
    return {name: _probe_result(p) for name, p in procs.items()}


@pytest.mark.parametrize(
    "name, banner, charts",
    [
        ("passing", "PASS", 2),
        ("interrupted", "INCOMPLETE", 2),
        ("unreachable", "NOT RUN: target unreachable", 1),  # no test ran: no timeline
    ],
)
def test_report_renders_in_chromium(measured, name, banner, charts):
    m = measured[name]
    assert m["banner"].startswith(banner), m["banner"]
    assert m["innerWidth"] == WIDTH
    assert m["scrollWidth"] <= m["innerWidth"], f"page overflows horizontally: {m}"
    assert len(m["svgs"]) == charts
    for width, height, rects in m["svgs"]:
        assert width > 100 and height > 20 and rects > 0, m["svgs"]


def test_probe_sees_an_overflow(measured):
    assert measured["wide"]["scrollWidth"] > WIDTH
