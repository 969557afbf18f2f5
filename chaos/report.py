"""``report.html`` of a chaos run: one self-contained page (inline SVG, no scripts).

Top plot: latency of every completed client op over time (ok green, fail red, info
orange), log scale; bottom plot: completed ops per second. Fault windows are shaded in
both, ops named by an anomaly's examples are marked with a red ring.
"""

from __future__ import annotations

import html
import json
import math
from typing import Any

from checkers.history import History

W, H, PAD = 900, 220, 45
COLORS = {"ok": "#2a9d3a", "fail": "#d62828", "info": "#f08c00"}
ANOMALY_FIELDS = ("op", "writer", "reader", "prev-op")


def _ops(history: History) -> tuple[list[tuple[float, float, str, int]], int, int]:
    """(start s, latency ms, type, completion index) of client ops, plus t0 and t1 in ns."""
    pairs = [p for p in history.pairs() if p.process != "nemesis" and p.complete is not None]
    if not len(history):
        return [], 0, 1
    t0, t1 = history[0].time_ns, max(history[-1].time_ns, history[0].time_ns + 1)
    return ([((p.invoke.time_ns - t0) / 1e9, max((p.complete.time_ns - p.invoke.time_ns) / 1e6, 0.01),
              p.type, p.index) for p in pairs], t0, t1)


def _faults(history: History, t0: int) -> list[tuple[float, float, str]]:
    out, open_ = [], {}
    for op in history:
        if op.process != "nemesis" or op.type == "invoke":
            continue
        name = (op.value or {}).get("fault", "?") if isinstance(op.value, dict) else "?"
        if op.f == "start-fault":
            open_[name] = (op.time_ns - t0) / 1e9
        elif op.f == "stop-fault" and name in open_:
            out.append((open_.pop(name), (op.time_ns - t0) / 1e9, name))
    end = (history[-1].time_ns - t0) / 1e9 if len(history) else 0
    out += [(s, end, n) for n, s in open_.items()]
    return out


def _marked(check: dict) -> set[int]:
    idx: set[int] = set()
    for r in check.get("results", {}).values():
        for t, exs in r.get("examples", {}).items():
            if t in r.get("allowed_error_types", ()):
                continue
            for e in exs:
                idx.update(e[f] for f in ANOMALY_FIELDS if isinstance(e.get(f), int))
    return idx


def _svg(body: list[str], faults, span: float, ylabel: str) -> str:
    x = lambda s: PAD + (W - 2 * PAD) * s / span  # noqa: E731
    shade = [f'<rect x="{x(a):.1f}" y="0" width="{max(x(b) - x(a), 1):.1f}" height="{H - PAD}" '
             f'fill="#888" opacity="0.18"><title>{html.escape(n)}</title></rect>' for a, b, n in faults]
    axis = (f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{H - PAD}" stroke="#333"/>'
            f'<text x="{W / 2}" y="{H - 10}" text-anchor="middle" font-size="11">seconds</text>'
            f'<text x="12" y="{(H - PAD) / 2}" font-size="11" transform="rotate(-90 12 {(H - PAD) / 2})">'
            f'{ylabel}</text>')
    ticks = "".join(f'<text x="{x(s):.1f}" y="{H - PAD + 14}" font-size="10" text-anchor="middle">{s:.0f}</text>'
                    for s in range(0, int(span) + 1, max(1, int(span) // 10)))
    return f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}">{"".join(shade)}{axis}{ticks}{"".join(body)}</svg>'


def _at(ns: Any, t0: int) -> str:
    """A fault's start or heal as seconds from the history's first op ("" if unknown)."""
    return f"{(ns - t0) / 1e9:.1f}" if isinstance(ns, int) and t0 else ""


def render(history: History, check: dict, faults: list[dict], meta: dict[str, Any]) -> str:
    ops, t0, t1 = _ops(history)
    span = max((t1 - t0) / 1e9, 1.0)
    windows = _faults(history, t0)
    marked = _marked(check)
    lat_max = max([math.log10(lat) for _, lat, _, _ in ops] + [1.0])
    y_lat = lambda ms: (H - PAD) * (1 - (math.log10(ms) + 2) / (lat_max + 2.2))  # noqa: E731
    x = lambda s: PAD + (W - 2 * PAD) * s / span  # noqa: E731
    dots = []
    for s, lat, t, i in ops:
        dots.append(f'<circle cx="{x(s):.1f}" cy="{y_lat(lat):.1f}" r="2" fill="{COLORS.get(t, "#000")}">'
                    f'<title>op {i} {t} {lat:.1f} ms</title></circle>')
        if i in marked:
            dots.append(f'<circle cx="{x(s):.1f}" cy="{y_lat(lat):.1f}" r="7" fill="none" stroke="red" stroke-width="2">'
                        f'<title>anomaly example: op {i}</title></circle>')
    dots += [f'<text x="{PAD - 4}" y="{y_lat(ms) + 3:.1f}" font-size="9" text-anchor="end">{ms:g}</text>'
             for ms in (1, 10, 100, 1000, 10000) if math.log10(ms) <= lat_max + 0.2]
    buckets = [0] * (int(span) + 1)
    for s, lat, _, _ in ops:
        buckets[min(int(s + lat / 1e3), len(buckets) - 1)] += 1
    top = max(buckets + [1])
    pts = " ".join(f"{x(b + 0.5):.1f},{(H - PAD) * (1 - n / top):.1f}" for b, n in enumerate(buckets))
    thr = [f'<polyline points="{pts}" fill="none" stroke="#1d3557" stroke-width="1.5"/>',
           f'<text x="{PAD}" y="12" font-size="10">max {top} ops/s</text>']
    verdict = check.get("valid")
    rows = "".join(f"<tr><td>{html.escape(a['type'])}</td><td>{a['count']}</td>"
                   f"<td>{html.escape(', '.join(a['requirements']))}</td></tr>"
                   for a in check.get("anomalies", []) + check.get("liveness", []))
    fault_rows = "".join(f"<tr><td>{_at(f.get('started_ns'), t0)}</td><td>{_at(f.get('healed_ns'), t0)}</td>"
                         f"<td>{html.escape(f['fault'])}</td><td>{f['nodes']}</td><td>{f['effective']}</td>"
                         f"<td>{html.escape(f.get('evidence') or f.get('error') or '')}</td></tr>" for f in faults)
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>kipcheck chaos: {html.escape(str(verdict))}</title>
<style>body{{font-family:sans-serif;margin:20px}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:3px 8px}}</style>
</head><body><h1>kipcheck chaos: valid = {html.escape(json.dumps(verdict))}</h1>
<p>{html.escape(json.dumps(meta))}</p>
<h2>Latency (log ms; green ok, red fail, orange info; grey = fault window; red ring = anomaly)</h2>
{_svg(dots, windows, span, "latency")}
<h2>Throughput (completed ops/s)</h2>{_svg(thr, windows, span, "ops/s")}
<h2>Anomalies</h2><table><tr><th>type</th><th>count</th><th>requirements</th></tr>{rows}</table>
<h2>Nemesis timeline (seconds from the first op)</h2><table><tr><th>start</th><th>healed</th><th>fault</th><th>nodes</th><th>effective</th><th>evidence</th></tr>{fault_rows}</table>
</body></html>"""
