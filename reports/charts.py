"""Inline SVG charts for the HTML report: drawn in Python, no script, no network.

Both charts scale with the page (viewBox, width 100%), so they never widen it.
"""

from __future__ import annotations

from html import escape
from typing import Any, Mapping

# Requirement verdicts in stacking order, with fill colours matching report.css.
SEGMENTS = (
    ("pass", "passed", "#2da44e"),
    ("fail", "failed", "#cf222e"),
    ("not_supported", "not supported", "#8c959f"),
    ("incomplete", "incomplete", "#d4a72c"),
    ("untested", "untested", "#d0d7de"),
    ("out_of_scope", "out of scope", "#eef1f4"),
)
TEST_FILL = {"pass": "#2da44e", "fail": "#cf222e", "error": "#cf222e", "not_supported": "#8c959f",
             "skipped": "#d0d7de"}
WIDTH = 1000
FONT = 'font-family="Helvetica, Arial, sans-serif"'


def _t(v: Any) -> str:
    return escape(str(v), quote=True)


def legend(items: list[tuple[str, str]], y: int) -> str:
    out, x = [], 0
    for label, fill in items:
        out.append(f'<rect x="{x}" y="{y}" width="12" height="12" fill="{fill}" stroke="#afb8c1" stroke-width="0.5"/>'
                   f'<text x="{x + 16}" y="{y + 10}" font-size="12" {FONT} fill="#1f2328">{_t(label)}</text>')
        x += 24 + 7 * len(label)
    return "".join(out)


def requirement_bars(kips: list[Mapping[str, Any]], specs: list[str]) -> str:
    """Per KIP x target: one bar of its requirements stacked by verdict (pass, fail, not
    supported, incomplete, untested, out of scope)."""
    label_w, row_h, top = 260, 24, 4
    rows = [(k, s) for k in kips for s in specs]
    if not rows:
        return ""
    height = top + row_h * len(rows) + 30
    bar_w = WIDTH - label_w - 60
    out = [f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" width="100%" role="img" '
           f'aria-label="requirements per KIP and target by verdict" xmlns="http://www.w3.org/2000/svg">']
    for i, (k, spec) in enumerate(rows):
        y = top + i * row_h
        c = k["per_target"][spec]
        total = sum(c.get(key, 0) for key, _, _ in SEGMENTS)
        name = k["kip"] if len(specs) == 1 else f"{k['kip']} · {spec}"
        out.append(f'<text x="{label_w - 8}" y="{y + 15}" font-size="12" text-anchor="end" {FONT} '
                   f'fill="#1f2328">{_t(name[:40])}</text>')
        out.append(f'<rect x="{label_w}" y="{y + 3}" width="{bar_w}" height="{row_h - 8}" fill="#fff" '
                   'stroke="#d0d7de" stroke-width="0.5"/>')
        x = float(label_w)
        for key, label, fill in SEGMENTS:
            n = c.get(key, 0)
            if not n or not total:
                continue
            w = bar_w * n / total
            out.append(f'<rect x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="{row_h - 8}" fill="{fill}">'
                       f'<title>{_t(name)}: {n} {label}</title></rect>')
            x += w
        out.append(f'<text x="{label_w + bar_w + 6}" y="{y + 15}" font-size="11" {FONT} fill="#57606a">'
                   f'{total}</text>')
    out.append(legend([(label, fill) for _, label, fill in SEGMENTS], top + row_h * len(rows) + 10))
    out.append("</svg>")
    return "".join(out)


def timeline(tl: Mapping[str, Any]) -> str:
    """A Gantt-like strip per lane (xdist worker or thread): one bar per test, coloured by
    its verdict, placed at its start time."""
    bars = tl.get("bars") or []
    if not bars:
        return ""
    lanes = list(tl.get("lanes") or sorted({b["lane"] for b in bars}))
    label_w, lane_h, top = 90, 26, 4
    span = max((b["start"] + b["duration"]) for b in bars) or 1.0
    plot_w = WIDTH - label_w - 10
    axis_y = top + lane_h * len(lanes)
    height = axis_y + 50
    out = [f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" width="100%" role="img" '
           f'aria-label="test timeline" xmlns="http://www.w3.org/2000/svg">']
    for i, lane in enumerate(lanes):
        y = top + i * lane_h
        out.append(f'<text x="{label_w - 8}" y="{y + 16}" font-size="12" text-anchor="end" {FONT} '
                   f'fill="#1f2328">{_t(str(lane)[:14])}</text>')
        out.append(f'<rect x="{label_w}" y="{y + 3}" width="{plot_w}" height="{lane_h - 6}" fill="#f6f8fa"/>')
    index = {lane: i for i, lane in enumerate(lanes)}
    for b in bars:
        y = top + index[b["lane"]] * lane_h
        x = label_w + plot_w * b["start"] / span
        w = max(plot_w * b["duration"] / span, 1.0)
        fill = TEST_FILL.get(b["verdict"], "#8c959f")
        out.append(f'<rect x="{x:.1f}" y="{y + 5}" width="{w:.1f}" height="{lane_h - 10}" fill="{fill}" '
                   f'stroke="#fff" stroke-width="0.3"><title>{_t(b["test"])} on {_t(b["target"])}: '
                   f'{_t(b["verdict"])}, {b["duration"]:.2f} s at +{b["start"]:.1f} s</title></rect>')
    for j in range(6):
        t = span * j / 5
        x = label_w + plot_w * j / 5
        anchor = "start" if j == 0 else "end" if j == 5 else "middle"
        out.append(f'<line x1="{x:.1f}" y1="{axis_y}" x2="{x:.1f}" y2="{axis_y + 4}" stroke="#57606a"/>'
                   f'<text x="{x:.1f}" y="{axis_y + 16}" font-size="11" text-anchor="{anchor}" {FONT} '
                   f'fill="#57606a">{t:.0f} s</text>' if span >= 10 else
                   f'<text x="{x:.1f}" y="{axis_y + 16}" font-size="11" text-anchor="{anchor}" {FONT} '
                   f'fill="#57606a">{t:.1f} s</text>')
    out.append(legend([("pass", TEST_FILL["pass"]), ("fail / error", TEST_FILL["fail"]),
                       ("not supported", TEST_FILL["not_supported"]), ("skipped", TEST_FILL["skipped"])],
                      axis_y + 26))
    out.append("</svg>")
    return "".join(out)
