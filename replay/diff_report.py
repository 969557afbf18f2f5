"""The `kipcheck diff` report: summary.json, summary.md and summary.html in the output dir.

Both engines hand over the same result dict (alignment counts, learned noise, summary
groups); this module only formats it. divergences.parquet is written by the engine.
"""

from __future__ import annotations

import html
import json
import os
from typing import Any

from replay.diff_input import TraceInput

SUMMARY_JSON, SUMMARY_MD, SUMMARY_HTML = "summary.json", "summary.md", "summary.html"
DIVERGENCES = "divergences.parquet"


def build_summary(engine: str, inputs: dict[str, TraceInput | None], result: dict[str, Any],
                  with_json: bool) -> dict[str, Any]:
    groups = result["groups"]
    real = [g for g in groups if not g["noise"]]
    noisy = [g for g in groups if g["noise"]]
    total = sum(g["count"] for g in real)
    return {
        "kipcheck_diff": 1,
        "engine": engine,
        "compared": "columns + response JSON" if with_json else "columns",
        "traces": {k: (v.to_json() if v is not None else None) for k, v in inputs.items()},
        "compared_exchanges": result["compared_exchanges"],
        "alignment": result["alignment"],
        "divergences": {"rows": total, "groups": real},
        "noise": {"learned": result["noise"], "suppressed_rows": sum(g["count"] for g in noisy), "groups": noisy},
        "verdict": "no divergence" if total == 0 else f"{total} divergence(s) in {len(real)} group(s)",
        "exit_status": 0 if total == 0 else 1,
    }


def _errors(g: dict) -> str:
    a, b = g["a_error_code"], g["b_error_code"]
    if a is None and b is None:
        return ""
    return f"{'-' if a is None else a} → {'-' if b is None else b}"


def _sample(g: dict) -> str:
    s = g["samples"][0] if g["samples"] else None
    if s is None:
        return ""
    return f"A#{s['a_seq']} / B#{s['b_seq']} {s['path']}: {_short(s['a_value'])} ≠ {_short(s['b_value'])}"


def _short(value: str | None, limit: int = 80) -> str:
    """Table cells stay readable; summary.json and divergences.parquet keep whole values."""
    text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


_COLUMNS = ("API", "field", "kind", "error code A → B", "requirement ids", "rows", "exchanges", "sample")


def _cells(g: dict) -> list[str]:
    return [g["api_name"], g["field"], g["kind"], _errors(g), ", ".join(g["requirement_ids"]), str(g["count"]),
            str(g["exchanges"]), _sample(g)]


def _md_table(groups: list[dict]) -> list[str]:
    if not groups:
        return ["(none)"]
    esc = lambda s: s.replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(_COLUMNS) + " |", "|" + "---|" * len(_COLUMNS)]
    lines += ["| " + " | ".join(esc(c) for c in _cells(g)) + " |" for g in groups]
    return lines


def _trace_lines(summary: dict) -> list[str]:
    out = []
    for name, t in summary["traces"].items():
        if t is None:
            continue
        line = (f"* {name}: `{t['directory']}` — {t['segments']} segment(s), {t['exchanges']} exchange(s), "
                f"{t['gap_rows']} gap row(s) ({t['gap_exchanges']} exchange(s) not recorded), "
                f"{t['undecoded_exchanges']} undecoded (left out)")
        out.append(line)
        out += [f"  * not read: {s}" for s in t["segments_not_read"]]
    return out


def _noise_lines(summary: dict) -> list[str]:
    learned = summary["noise"]["learned"]
    if not learned:
        return ["No noise learned (no `--noise` trace, or the two runs agreed everywhere)."]
    lines = ["| API | field | differing | compared | rate |", "|---|---|---|---|---|"]
    lines += [f"| {e['api_name']} | {e['field']} | {e['differing']} | {e['compared']} | {e['rate']:.3f} |" for e in learned]
    return lines


def to_markdown(summary: dict) -> str:
    al = summary["alignment"]
    lines = [
        "# kipcheck diff", "",
        f"**Verdict: {summary['verdict']}** (engine {summary['engine']}, compared {summary['compared']})", "",
        "## Traces", "", *_trace_lines(summary), "",
        "## Alignment", "",
        f"{al['pairs_connection']} pair(s) aligned by connection, {al['pairs_client']} by client; "
        f"{al['only_in_a']} exchange(s) only in A, {al['only_in_b']} only in B.", "",
        "## Divergences", "", *_md_table(summary["divergences"]["groups"]), "",
        "## Noise (suppressed)", "",
        f"{summary['noise']['suppressed_rows']} difference row(s) suppressed as noise.", "",
        *_md_table(summary["noise"]["groups"]), "",
        "### Learned noise (A vs the --noise run)", "", *_noise_lines(summary), "",
    ]
    return "\n".join(lines)


def _html_table(groups: list[dict]) -> str:
    if not groups:
        return "<p>(none)</p>"
    head = "".join(f"<th>{html.escape(c)}</th>" for c in _COLUMNS)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in _cells(g)) + "</tr>" for g in groups)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def to_html(summary: dict) -> str:
    al = summary["alignment"]
    traces = "".join(f"<li>{html.escape(line[2:])}</li>" for line in _trace_lines(summary))
    learned = summary["noise"]["learned"]
    noise_rows = "".join(
        f"<tr><td>{html.escape(e['api_name'])}</td><td>{html.escape(e['field'])}</td><td>{e['differing']}</td>"
        f"<td>{e['compared']}</td><td>{e['rate']:.3f}</td></tr>" for e in learned)
    color = "#2e7d32" if summary["exit_status"] == 0 else "#c62828"
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>kipcheck diff</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}}th{{background:#eee}}</style></head>
<body><h1>kipcheck diff</h1>
<p style="color:{color};font-weight:bold">Verdict: {html.escape(summary['verdict'])}</p>
<p>engine {html.escape(summary['engine'])}, compared {html.escape(summary['compared'])}</p>
<h2>Traces</h2><ul>{traces}</ul>
<h2>Alignment</h2><p>{al['pairs_connection']} pair(s) aligned by connection, {al['pairs_client']} by client;
{al['only_in_a']} exchange(s) only in A, {al['only_in_b']} only in B.</p>
<h2>Divergences</h2>{_html_table(summary['divergences']['groups'])}
<h2>Noise (suppressed)</h2><p>{summary['noise']['suppressed_rows']} difference row(s) suppressed.</p>
{_html_table(summary['noise']['groups'])}
<h3>Learned noise</h3><table><thead><tr><th>API</th><th>field</th><th>differing</th><th>compared</th><th>rate</th></tr></thead>
<tbody>{noise_rows}</tbody></table></body></html>
"""


def write_summary(out_dir: str, summary: dict) -> None:
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, SUMMARY_JSON), "w") as fh:
        json.dump(summary, fh, indent=2, sort_keys=False, default=str)
    with open(os.path.join(out_dir, SUMMARY_MD), "w") as fh:
        fh.write(to_markdown(summary))
    with open(os.path.join(out_dir, SUMMARY_HTML), "w") as fh:
        fh.write(to_html(summary))
