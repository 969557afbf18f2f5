"""Render the certification report model as one self-contained HTML page.

No external resources: CSS and the (optional) filter script are inlined from
reports/templates/. Every value taken from results, catalog or register is escaped.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any, Iterable, Mapping

from reports.certification import EXPECTED_FAILURE, REQ_VERDICTS, UNCATALOGUED, UNEXPECTED_PASS

VERDICT_LABEL = {
    "pass": "pass",
    "fail": "fail",
    "error": "error",
    "not_supported": "not supported",
    "incomplete": "incomplete",
    "untested": "untested",
    "skipped": "skipped",
}
# Count labels used in matrix cells, in display order.
CELL_COUNTS = (
    ("pass", "passed"),
    ("fail", "failed"),
    ("not_supported", "not supported"),
    ("incomplete", "incomplete"),
    ("untested", "untested"),
)


def _template(name: str) -> str:
    try:
        from importlib.resources import files

        return files("reports").joinpath("templates", name).read_text(encoding="utf-8")
    except Exception:
        p = Path(__file__).with_name("templates") / name
        return p.read_text(encoding="utf-8") if p.is_file() else ""


def e(value: Any) -> str:
    """Escape any value for HTML text or attribute context."""
    if value is None:
        return ""
    return escape(str(value), quote=True)


def _cls(verdict: str) -> str:
    return "v-" + verdict.replace(" ", "-")


def _badge(verdict: str, title: str | None = None) -> str:
    t = f' title="{e(title)}"' if title else ""
    return f'<span class="badge {_cls(verdict)}"{t}>{e(VERDICT_LABEL.get(verdict, verdict))}</span>'


def _fmt_s(v: Any) -> str:
    if v is None or v == "":
        return "—"
    try:
        return f"{float(v):.2f} s"
    except (TypeError, ValueError):
        return e(v)


def _val(v: Any) -> str:
    if isinstance(v, str):
        text = v
    else:
        try:
            text = json.dumps(v, sort_keys=True, default=str)
        except (TypeError, ValueError):
            text = repr(v)
    return f'<pre class="val">{e(text)}</pre>'


def _table(head: Iterable[str], rows: Iterable[Iterable[str]], cls: str = "", num_cols: set[int] | None = None) -> str:
    num_cols = num_cols or set()
    h = "".join(f'<th{" class=num" if i in num_cols else ""}>{c}</th>' for i, c in enumerate(head))
    body = []
    for r in rows:
        body.append(
            "<tr>" + "".join(f'<td{" class=num" if i in num_cols else ""}>{c}</td>' for i, c in enumerate(r)) + "</tr>"
        )
    return f'<table class="{cls}"><thead><tr>{h}</tr></thead><tbody>{"".join(body)}</tbody></table>'


# ---------------------------------------------------------------------------------


def render_html(report: Mapping[str, Any]) -> str:
    specs = [t["spec"] for t in report["targets"]]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>kipcheck certification report — {e(', '.join(specs) or 'no targets')}</title>",
        f"<style>{_template('report.css')}</style>",
        "</head><body>",
        _header(report),
        "<main>",
        _banner(report),
        _toc(),
        _targets(report),
        _matrix(report),
        _untested(report),
        _requirements(report, specs),
        _deviations(report),
        _divergences(report),
        _problems(report),
        _run(report),
        f'<footer>kipcheck {e(report.get("kipcheck_version"))} · report schema '
        f'{e(report.get("schema"))} v{e(report.get("schema_version"))} · generated {e(report.get("generated_at"))}'
        "</footer>",
        "</main>",
        f"<script>{_template('report.js')}</script>",
        "</body></html>",
    ]
    return "\n".join(parts)


def write_html(report: Mapping[str, Any], path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(p.suffix + ".tmp")
    tmp.write_text(render_html(report), encoding="utf-8")
    tmp.replace(p)
    return p


# ---------------------------------------------------------------------------------
# sections


def _header(report: Mapping[str, Any]) -> str:
    host = report.get("host") or {}
    return (
        '<header class="top">'
        "<h1>kipcheck certification report</h1>"
        f'<div class="sub">kipcheck {e(report.get("kipcheck_version"))} · generated {e(report.get("generated_at"))}'
        f' · host {e(host.get("hostname"))} ({e(host.get("platform"))}, Python {e(host.get("python"))})</div>'
        "</header>"
    )


def _banner(report: Mapping[str, Any]) -> str:
    s = report["summary"]
    result = s["result"]
    banner_text = {
        "pass": "PASS — no test failed on any target",
        "fail": "FAIL — at least one test failed or errored",
        "no-results": "NO RESULTS — no test ran",
    }.get(result, result)
    broken = [t["spec"] for t in report["targets"] if t.get("start_error")]
    if broken:
        banner_text += f" · target(s) failed to start: {', '.join(broken)}"
    known = sum(1 for m in (report.get("deviations") or {}).get("matched") or [] if m.get("status") == EXPECTED_FAILURE)
    known_note = (
        f' {known} failing test result(s) are <a href="#deviations">registered known target deviations</a>: '
        "expected, explained, and still failures."
        if known
        else ""
    )
    return (
        f'<div class="banner {e(result)}">{e(banner_text)}</div>'
        f'<p class="note">{s["tests_total"]} test results · {s["requirements_tested"]} of '
        f'{s["requirements_total"]} catalogued requirements covered by at least one test · '
        f'{s["requirements_untested"]} untested. Pass means no failure; see the matrix for what was '
        f"not supported or untested.{known_note}</p>"
    )


def _toc() -> str:
    links = [
        ("targets", "Targets"),
        ("matrix", "Compliance matrix"),
        ("untested", "Untested requirements"),
        ("requirements", "Requirements"),
        ("deviations", "Known target deviations"),
        ("divergences", "Divergences"),
        ("run", "Run"),
    ]
    return '<nav class="toc">' + "".join(f'<a href="#{a}">{t}</a>' for a, t in links) + "</nav>"


def _features(feats: Mapping[str, Any], names: Iterable[str]) -> list[str]:
    return [e(feats.get(n, "—")) for n in names]


def _targets(report: Mapping[str, Any]) -> str:
    rows = []
    for t in report["targets"]:
        ff = t.get("finalized_features") or {}
        other = ", ".join(f"{k}={v}" for k, v in sorted(ff.items()) if k not in ("transaction.version", "share.version"))
        rows.append(
            [
                f"<code>{e(t['spec'])}</code>",
                e(t.get("kind")),
                e(t.get("version") or "—"),
                e(t.get("nodes") if t.get("nodes") is not None else "—"),
                f"<code>{e(t.get('bootstrap') or '—')}</code>",
                _fmt_s(t.get("startup_seconds")),
                *_features(ff, ("transaction.version", "share.version")),
                e(other or "—"),
                _target_status(t),
            ]
        )
    note = (
        '<p class="note">Finalized feature levels as advertised in ApiVersions; '
        "“—” means the target did not advertise the feature (or was never described).</p>"
    )
    return (
        '<h2 id="targets">Targets</h2>'
        + note
        + _table(
            ["spec", "kind", "version", "nodes", "bootstrap", "startup", "transaction.version", "share.version",
             "other features", "status"],
            rows,
            num_cols={3, 5, 6, 7},
        )
    )


def _target_status(t: Mapping[str, Any]) -> str:
    if t.get("start_error"):
        return f'{_badge("fail")} <span title="{e(t["start_error"])}">failed to start: {e(t["start_error"])}</span>'
    if t.get("skip_reason"):
        return f'{_badge("skipped")} {e(t["skip_reason"])}'
    errs = t.get("errors") or []
    if errs:
        return '<span class="muted">' + "<br>".join(e(x) for x in errs) + "</span>"
    if not t.get("tests_total"):
        return '<span class="muted">no results</span>'
    return '<span class="muted">ran</span>'


def _legend() -> str:
    items = [
        ("compliant", "every tested requirement passed"),
        ("non-compliant", "at least one requirement failed"),
        ("partial", "some passed, others not supported or incomplete"),
        ("not supported", "the target does not support what the tests need"),
        ("untested", "no test ran"),
    ]
    return '<p class="legend note">' + " ".join(f'{_badge(v)} {e(d)} &nbsp;' for v, d in items) + "</p>"


def _matrix(report: Mapping[str, Any]) -> str:
    specs = [t["spec"] for t in report["targets"]]
    head = ["KIP", *[f"<code>{e(s)}</code>" for s in specs], "requirements", "no test"]
    rows = []
    for k in report["kips"]:
        cells = [
            f'<td><strong>{e(k["kip"])}</strong><br><span class="muted">{e(k.get("title"))}</span></td>'
        ]
        for s in specs:
            c = k["per_target"][s]
            counts = "".join(
                f"<span>{c[key]} {label}</span>" for key, label in CELL_COUNTS if c.get(key) or key != "incomplete"
            )
            title = ", ".join(f"{c[key]} {label}" for key, label in CELL_COUNTS)
            total = sum(c.get(v, 0) for v in REQ_VERDICTS)
            tested = total - c.get("untested", 0)
            cells.append(
                f'<td class="cell {_cls(c["verdict"])}" title="{e(title)}">'
                f'<span class="word">{e(c["verdict"])}</span><span class="counts">{counts}</span>'
                f'<span class="cover">{tested} of {total} requirements tested on this target</span></td>'
            )
        cells.append(f'<td class="num">{len(k["requirements"])}</td>')
        cells.append(f'<td class="num">{len(k["untested"])}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    h = "".join(f"<th>{c}</th>" for c in head)
    note = (
        '<p class="note">Rows: requirement catalogs; columns: targets. Counts are requirements: '
        "a requirement passes on a target only if every covering test that ran there passed; "
        "“not supported” and skipped tests never count as passes; “incomplete” means some covering "
        "tests passed and others were not supported or skipped. “no test” counts catalog requirements "
        "that no test covers at all.</p>"
    )
    return (
        '<h2 id="matrix">Per-KIP compliance matrix</h2>'
        + note
        + _legend()
        + f'<table class="matrix"><thead><tr>{h}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )


def _untested(report: Mapping[str, Any]) -> str:
    rows = []
    for k in report["kips"]:
        ids = k["untested"]
        listing = " ".join(f'<code class="rid">{e(i)}</code>' for i in ids) if ids else '<span class="muted">none</span>'
        if len(ids) > 12:
            listing = f"<details><summary>{len(ids)} ids</summary>{listing}</details>"
        rows.append([f"<strong>{e(k['kip'])}</strong>", str(len(ids)), str(len(k["requirements"])), listing])
    return (
        '<h2 id="untested">Untested requirements</h2>'
        '<p class="note">Catalog requirements that no test in this run covers (on any target).</p>'
        + _table(["KIP", "untested", "of", "ids"], rows, num_cols={1, 2})
    )


def dev_anchor(dev_id: Any) -> str:
    """The fragment id of a deviation's row in the "Known target deviations" section."""
    return "dev-" + "".join(c if c.isalnum() or c in "-_" else "_" for c in str(dev_id))


def _dev_link(dev_id: Any) -> str:
    return f'<a href="#{e(dev_anchor(dev_id))}">{e(dev_id)}</a>'


def _ids_html(ids: list[str]) -> str:
    return ", ".join(_dev_link(i) for i in ids)


def _deviation_label(pt: Mapping[str, Any]) -> str:
    """For a failing cell: "(known deviation DEV-001)" when registered deviations explain
    its failing tests; anything they do not explain is named too, so an unexplained
    failure never hides behind a known one. The verdict itself stays "fail"."""
    if pt.get("verdict") != "fail":
        return ""
    failing = [t for t in pt.get("tests") or [] if t.get("verdict") in ("fail", "error")]
    expected: list[str] = []
    stale: list[str] = []
    other = 0
    for t in failing:
        dv = t.get("deviation") or {}
        bucket = {EXPECTED_FAILURE: expected, UNEXPECTED_PASS: stale}.get(dv.get("status"))
        if bucket is None:
            other += 1
        elif dv["id"] not in bucket:
            bucket.append(dv["id"])
    if not expected and not stale:
        return ""
    parts = []
    if expected:
        parts.append(f"known deviation {_ids_html(expected)}")
    if stale:
        parts.append(f"{_ids_html(stale)} did not occur (strict XPASS)")
    if other:
        parts.append(f"+ {other} other failing test(s)")
    return f' <span class="devnote">({"; ".join(parts)})</span>'


def _verdict_cell(pt: Mapping[str, Any]) -> str:
    v = pt["verdict"]
    tests = pt.get("tests") or []

    def test_dev(t: Mapping[str, Any]) -> str:
        dv = t.get("deviation") or {}
        if dv.get("status") == EXPECTED_FAILURE:
            return f" (known deviation {_dev_link(dv['id'])})"
        if dv.get("status") == UNEXPECTED_PASS:
            return f" ({_dev_link(dv['id'])} did not occur)"
        return ""

    items = "".join(
        f"<li>{_badge(t['verdict'])}{test_dev(t)} <code>{e(t['nodeid'])}</code>"
        + (f" — {e(t['reason'])}" if t.get("reason") else "")
        + "</li>"
        for t in tests
    )
    detail = f'<div class="why">{e(pt.get("reason"))}</div>'
    if items:
        detail += f'<ul class="tests">{items}</ul>'
    return (
        f'<td class="vcell"><details><summary>{_badge(v, pt.get("reason"))}{_deviation_label(pt)}</summary>'
        f"{detail}</details></td>"
    )


def _requirements(report: Mapping[str, Any], specs: list[str]) -> str:
    head = ["id", "level", "behaviour", *[f"<code>{e(s)}</code>" for s in specs], "covering tests"]
    h = "".join(f"<th>{c}</th>" for c in head)
    body = []
    current_kip = None
    for r in report["requirements"]:
        if r["kip"] != current_kip:
            current_kip = r["kip"]
            body.append(
                f'<tr class="group"><th colspan="{len(head)}">{e(current_kip)}'
                + ("" if current_kip == UNCATALOGUED else "")
                + "</th></tr>"
            )
        statuses = " ".join(sorted({pt["verdict"] for pt in r["per_target"].values()}))
        section = f'<div class="muted">§ {e(r["section"])}</div>' if r.get("section") else ""
        by_name: dict[str, list[str]] = {}
        for t in r.get("tests") or []:
            by_name.setdefault(t["test"], []).append(t["nodeid"])
        tests_html = (
            '<ul class="tests">'
            + "".join(f'<li title="{e(chr(10).join(ids))}"><code>{e(name)}</code></li>' for name, ids in by_name.items())
            + "</ul>"
            if by_name
            else '<span class="muted">none</span>'
        )
        body.append(
            f'<tr data-status="{e(statuses)}">'
            f'<td><code>{e(r["id"])}</code></td>'
            f'<td><span class="level">{e(r.get("level") or "")}</span></td>'
            f'<td class="behaviour">{e(r.get("behaviour"))}{section}</td>'
            + "".join(_verdict_cell(r["per_target"][s]) for s in specs)
            + f"<td>{tests_html}</td></tr>"
        )
    toolbar = (
        '<div class="toolbar">show: '
        '<button data-mode="all" class="on">all</button>'
        '<button data-mode="not-passing">not passing</button>'
        '<button data-mode="failing">failing</button>'
        '<input id="req-filter" type="search" placeholder="filter by id, text, test…" aria-label="filter requirements">'
        "</div>"
    )
    legend = '<p class="note">Click a verdict for its reason and the covering tests. Verdicts: ' + " ".join(
        _badge(v) for v in REQ_VERDICTS
    ) + "</p>"
    return (
        '<h2 id="requirements">Requirements</h2>'
        + legend
        + toolbar
        + f'<table class="reqs" id="reqs"><thead><tr>{h}</tr></thead><tbody>{"".join(body)}</tbody></table>'
    )


def _deviations(report: Mapping[str, Any]) -> str:
    d = report.get("deviations") or {}
    register = list(d.get("register") or [])
    matched = list(d.get("matched") or [])
    out = ['<h2 id="deviations">Known target deviations</h2>']
    out.append(
        '<p class="note">Failures of a named target kind that have been observed and explained '
        "(conformance/deviations/). The matching test runs as a strict expected failure: "
        "its verdict stays <strong>fail</strong> — a known deviation is still non-compliance — and "
        "when the target stops deviating the test fails as an unexpected pass until the entry is removed.</p>"
    )
    by_id: dict[str, list[Mapping[str, Any]]] = {}
    for m in matched:
        by_id.setdefault(str(m.get("id")), []).append(m)
    kinds: dict[str, list[str]] = {}
    for t in report.get("targets") or []:
        kinds.setdefault(str(t.get("kind")), []).append(str(t["spec"]))
    known_ids = {str(g.get("id")) for g in register}
    rows = []
    for g in register:
        gid = str(g.get("id"))
        rows.append(
            [
                f'<code id="{e(dev_anchor(gid))}">{e(gid)}</code>',
                f"<code>{e(g.get('target'))}</code>"
                + (f'<div class="muted">{e(g.get("versions"))}</div>' if g.get("versions") else ""),
                f"<code>{e(g.get('requirement') or '—')}</code>",
                f"<code>{e(g.get('test'))}</code>",
                e(g.get("observed")),
                e(g.get("evidence")),
                _deviation_run_status(by_id.get(gid, []), kinds.get(str(g.get("target")), [])),
            ]
        )
    for gid in sorted(set(by_id) - known_ids):
        rows.append(
            [
                f'<code id="{e(dev_anchor(gid))}">{e(gid)}</code>',
                "—",
                "—",
                "—",
                '<span class="muted">not in the deviation register</span>',
                "—",
                _deviation_run_status(by_id[gid], []),
            ]
        )
    if rows:
        out.append(
            _table(["id", "target", "requirement", "test", "observed", "evidence", "in this run"], rows, cls="devs")
        )
    else:
        out.append('<p class="note">The deviation register is empty or missing.</p>')
    return "".join(out)


def _deviation_run_status(matched: list[Mapping[str, Any]], specs_of_kind: list[str]) -> str:
    if matched:
        items = []
        for m in matched:
            if m.get("status") == EXPECTED_FAILURE:
                what = f"{_badge('fail')} failed as registered on"
            else:
                what = f"{_badge('fail')} did not occur (the test passed; strict XPASS) on"
            reqs = m.get("requirements") or []
            items.append(
                f"<li>{what} <code>{e(m.get('target'))}</code> "
                f'<span class="muted" title="{e(m.get("nodeid"))}">{e(m.get("test"))}</span>'
                + (f'<div class="muted">covers {e(", ".join(reqs))}</div>' if reqs else "")
                + "</li>"
            )
        return f'<ul class="tests">{"".join(items)}</ul>'
    if specs_of_kind:
        return (
            '<span class="muted">no matching result on '
            + ", ".join(f"<code>{e(s)}</code>" for s in specs_of_kind)
            + " (test not selected, or target version outside the entry's range)</span>"
        )
    return '<span class="muted">no target of this kind in this run</span>'


def _divergences(report: Mapping[str, Any]) -> str:
    d = report["divergences"]
    out = ['<h2 id="divergences">Divergences</h2>']
    out.append("<h3>Observed in this run</h3>")
    observed = d.get("observed") or []
    if observed:
        out.append(
            '<p class="note">Tests whose target behaved differently from the reference broker. '
            "On a passing test this means: passes, but differs from the reference here.</p>"
        )
        rows = []
        for o in observed:
            verdict = o.get("verdict") or ""
            prefix = "passes, but differs from the reference here" if verdict == "pass" else ""
            rows.append(
                [
                    f"<code>{e(o['target'])}</code>",
                    f'<code title="{e(o["nodeid"])}">{e(o["test"])}</code><br>{_badge(verdict)}'
                    + (f' <span class="muted">{e(prefix)}</span>' if prefix else ""),
                    f"<code>{e(o.get('requirement') or '—')}</code>",
                    e(o.get("what")),
                    _val(o.get("observed")),
                    _val(o.get("reference")),
                ]
            )
        out.append(_table(["target", "test", "requirement", "what", "target's answer", "reference's answer"], rows))
    else:
        out.append('<p class="note">No test reported a difference from the reference.</p>')
    out.append("<h3>Divergence register</h3>")
    register = d.get("register") or []
    if register:
        out.append(
            '<p class="note">Known places where Apache Kafka and the KIP text disagree, '
            "and what the reference does (conformance/divergences.yaml).</p>"
        )
        rows = []
        for g in register:
            ak = g.get("apache_kafka") or {}
            ev = g.get("evidence") or {}
            rows.append(
                [
                    f"<code>{e(g.get('id'))}</code>",
                    f"<code>{e(g.get('requirement') or '—')}</code>",
                    e(g.get("kip_text")),
                    (f'<span class="muted">{e(ak.get("versions"))}</span><br>' if ak.get("versions") else "")
                    + e(ak.get("behaviour")),
                    e(g.get("reference")),
                    (f"<code>{e(ev.get('test'))}</code><br>" if ev.get("test") else "") + e(ev.get("observation"))
                    + (f'<div class="muted">{e(g.get("notes"))}</div>' if g.get("notes") else ""),
                ]
            )
        out.append(_table(["id", "requirement", "KIP text", "Apache Kafka", "reference", "evidence"], rows))
    else:
        out.append('<p class="note">The divergence register is empty or missing.</p>')
    return "".join(out)


def _problems(report: Mapping[str, Any]) -> str:
    out = []
    twr = report.get("tests_without_requirements") or []
    if twr:
        rows = [
            [f"<code>{e(t['target'])}</code>", f"<code>{e(t['nodeid'])}</code>", _badge(t["verdict"]), e(t.get("reason"))]
            for t in twr
        ]
        out.append("<h3>Tests without a requirement marker</h3>")
        out.append('<p class="note">These results count towards the run result but not towards any KIP.</p>')
        out.append(_table(["target", "test", "verdict", "reason"], rows))
    probs = report.get("problems") or []
    if probs:
        out.append("<h3>Problems</h3>")
        out.append('<ul class="problems">' + "".join(f"<li>{e(p)}</li>" for p in probs) + "</ul>")
    if not out:
        return ""
    return '<h2 id="problems">Warnings</h2>' + "".join(out)


def _run(report: Mapping[str, Any]) -> str:
    run = report.get("run") or {}
    rows = []
    for t in report["targets"]:
        c = t.get("tests") or {}
        rows.append(
            [
                f"<code>{e(t['spec'])}</code>",
                str(t.get("tests_total", 0)),
                *(str(c.get(v, 0)) for v in ("pass", "fail", "error", "not_supported", "skipped")),
                _fmt_s(t.get("test_duration_s")),
                _fmt_s(t.get("startup_seconds")),
            ]
        )
    meta = []
    for label, key in (
        ("started", "started_at"),
        ("finished", "finished_at"),
        ("wall time", "wall_time_s"),
        ("workers", "workers"),
        ("suite filter", "suite"),
        ("pytest exit code", "pytest_exit_code"),
        ("results", "results_dir"),
    ):
        v = run.get(key)
        if v is None or v == "" or v == []:
            continue
        meta.append(f"<dt>{e(label)}</dt><dd>{_fmt_s(v) if key == 'wall_time_s' else e(v)}</dd>")
    if run.get("command"):
        cmd = run["command"]
        cmd = " ".join(cmd) if isinstance(cmd, list) else str(cmd)
        meta.append(f"<dt>command</dt><dd><code>{e(cmd)}</code></dd>")
    return (
        '<h2 id="run">Run</h2>'
        + (f'<dl class="meta">{"".join(meta)}</dl>' if meta else '<p class="note">No run metadata (report rebuilt from results only).</p>')
        + _table(
            ["target", "tests", "pass", "fail", "error", "not supported", "skipped", "test time (sum)", "startup"],
            rows,
            num_cols={1, 2, 3, 4, 5, 6, 7, 8},
        )
    )
