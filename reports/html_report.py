"""Render the certification report model as one self-contained HTML page.

No external resources: CSS and the (optional) filter script are inlined from
reports/templates/. Every value taken from results, catalog or register is escaped.
"""

from __future__ import annotations

import hashlib
import json
from html import escape
from importlib.resources import files
from pathlib import Path
from typing import Any, Iterable, Mapping

from reports import charts
from reports.client_suites import COUNT_KEYS, label as client_label
from reports.certification import report_bytes
from reports.register_views import UNCATALOGUED
from reports.verdicts import EXPECTED_FAILURE, OUT_OF_SCOPE, REQ_VERDICTS, UNEXPECTED_PASS

VERDICT_LABEL = {
    "pass": "pass",
    "fail": "fail",
    "error": "error",
    "not_supported": "not supported",
    "incomplete": "incomplete",
    "untested": "untested",
    "skipped": "skipped",
    "not_run": "not run: target down",
    OUT_OF_SCOPE: "out of scope",
}
# Count labels used in matrix cells, in display order.
CELL_COUNTS = (
    ("pass", "passed"),
    ("fail", "failed"),
    ("not_supported", "not supported"),
    ("incomplete", "incomplete"),
    ("untested", "untested"),
    (OUT_OF_SCOPE, "out of scope"),
)


def _template(name: str) -> str:
    try:
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


def _scroll(inner: str) -> str:
    """Wide tables scroll inside their own box, never the page."""
    return f'<div class="scroll">{inner}</div>'


def _fold(summary: str, inner: str, open_: bool = False, ident: str = "") -> str:
    """A section body collapsed by default (long registers and lists)."""
    i = f' id="{e(ident)}"' if ident else ""
    return f'<details class="fold"{i}{" open" if open_ else ""}><summary>{summary}</summary>{inner}</details>'


def _table(head: Iterable[str], rows: Iterable[Iterable[str]], cls: str = "", num_cols: set[int] | None = None) -> str:
    num_cols = num_cols or set()
    h = "".join(f'<th{" class=num" if i in num_cols else ""}>{c}</th>' for i, c in enumerate(head))
    body = []
    for r in rows:
        body.append(
            "<tr>" + "".join(f'<td{" class=num" if i in num_cols else ""}>{c}</td>' for i, c in enumerate(r)) + "</tr>"
        )
    return _scroll(f'<table class="{cls}"><thead><tr>{h}</tr></thead><tbody>{"".join(body)}</tbody></table>')


# ---------------------------------------------------------------------------------


def render_html(report: Mapping[str, Any], json_sha256: str | None = None) -> str:
    """The page; json_sha256 is the hash of the report.json written with it (None: not written)."""
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
        _statement(report, json_sha256),
        _matrix(report),
        _evidence(report),
        _timeline(report),
        _targets(report),
        _requirements(report, specs),
        _untested(report),
        _self_checks(report),
        _deviations(report),
        _clients(report),
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
    """Write the page. When the report.json beside it holds exactly this report's bytes
    (write_json ran first), the page prints its SHA-256 for the receiver to check."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(p.suffix + ".tmp")
    tmp.write_text(render_html(report, json_sha256_beside(report, p.parent / "report.json")), encoding="utf-8")
    tmp.replace(p)
    return p


def json_sha256_beside(report: Mapping[str, Any], json_path: Path) -> str | None:
    try:
        data = json_path.read_bytes()
    except OSError:
        return None
    return hashlib.sha256(data).hexdigest() if data == report_bytes(report) else None


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


BANNER_CLASS = {"pass": "pass", "partial-scope": "partial", "fail": "fail", "incomplete": "incomplete",
                "not-run": "notrun", "no-results": "no-results"}


def _banner(report: Mapping[str, Any]) -> str:
    s = report["summary"]
    result = s["result"]
    banner_text = s.get("banner") or result.upper()
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
    untested = "out of scope" if (s.get("completeness") or {}).get("narrowed") else "untested"
    return (
        f'<div class="banner {e(BANNER_CLASS.get(result, "no-results"))}" id="banner">{e(banner_text)}</div>'
        f'<p class="note">{s["tests_total"]} test results on targets · {s["requirements_tested"]} of '
        f'{s["requirements_total"]} catalogued requirements covered by at least one test · '
        f'{s["requirements_untested"]} {untested}. Pass means no failure; the matrix shows what was '
        f"not supported or not tested.{known_note}</p>"
    )


def _toc() -> str:
    links = [
        ("statement", "Statement"),
        ("matrix", "Compliance matrix"),
        ("evidence", "Evidence"),
        ("timeline", "Timeline"),
        ("targets", "Targets"),
        ("requirements", "Requirements"),
        ("untested", "Untested"),
        ("self-checks", "Self-checks"),
        ("deviations", "Known target deviations"),
        ("clients", "Client libraries"),
        ("divergences", "Divergences"),
        ("run", "Run"),
    ]
    return '<nav class="toc">' + "".join(f'<a href="#{a}">{t}</a>' for a, t in links) + "</nav>"


def _kv(pairs: Iterable[tuple[str, str]]) -> str:
    return '<dl class="meta">' + "".join(f"<dt>{e(k)}</dt><dd>{v}</dd>" for k, v in pairs) + "</dl>"


def _features_text(ff: Mapping[str, Any] | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted((ff or {}).items())) or "—"


def _statement(report: Mapping[str, Any], json_sha256: str | None) -> str:
    st = report.get("statement") or {}
    targets = []
    for t in st.get("targets") or []:
        targets.append(
            f"<li><code>{e(t['spec'])}</code> — cluster id <code>{e(t.get('cluster_id') or 'not recorded')}</code>, "
            f"broker version {e(t.get('broker_version') or 'not recorded')}, "
            f"finalized features at start {e(_features_text(t.get('finalized_features')))}"
            + (f", {e(t.get('security_protocol'))}" if t.get("security_protocol") else "")
            + "</li>"
        )
    cat = st.get("catalog") or {}
    kc = st.get("kipcheck") or {}
    clients = st.get("clients") or {}
    client_text = ", ".join(f"{k.replace('_', '-')} {v}" for k, v in clients.items() if v) or "not recorded"
    if st.get("clients_source") and st["clients_source"] != "run.json":
        client_text += f' <span class="muted">({e(st["clients_source"])})</span>'
    if json_sha256:
        digest = (f'<code class="hash">{e(json_sha256)}</code><div class="muted">Receiver: '
                  "<code>sha256sum report.json</code> must print this value; any other value means the "
                  "report.json you hold is not the one this page was written with.</div>")
    else:
        digest = '<span class="muted">report.json was not written with this page, so no hash is given</span>'
    pairs = [
        ("result", f'<strong>{e(report["summary"]["result"])}</strong> — {e((report["summary"].get("completeness") or {}).get("text"))}'),
        ("targets", f'<ul class="plain">{"".join(targets)}</ul>' if targets else "none"),
        ("KIPs in scope", e(", ".join(st.get("kips_in_scope") or []) or "none")),
        ("scope", e(st.get("scope"))),
        ("exclusions", e("; ".join(st.get("exclusions") or []) or "none")),
        ("catalog", f"{e(cat.get('version'))}, {len(cat.get('files') or [])} files, sha256 "
                    f"<code class=\"hash\">{e(cat.get('sha256') or 'unknown')}</code>"),
        ("kipcheck", f"{e(kc.get('version'))}" + (f", commit <code>{e(kc.get('commit'))}</code>" if kc.get("commit") else
                                                 " (no git checkout: package version only)")),
        ("client libraries", client_text),
        ("date", e(st.get("date"))),
        ("duration", _fmt_s(st.get("duration_s"))),
        ("evidence seal", e((st.get("evidence") or {}).get("text") or "not recorded")
         + (f' — root <code class="hash">{e(st["evidence"]["root"])}</code><div class="muted">Receiver: '
            "<code>kipcheck verify</code> on the folder checks every row against it.</div>"
            if (st.get("evidence") or {}).get("root") else "")),
        ("report.json SHA-256", digest),
    ]
    return '<h2 id="statement">Certification statement</h2>' + _kv(pairs)


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
                f"<code>{e(t.get('cluster_id') or '—')}</code>",
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
            ["spec", "kind", "version", "nodes", "cluster id", "bootstrap", "startup", "transaction.version",
             "share.version", "other features", "status"],
            rows,
            num_cols={3, 6, 7, 8},
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
        ("out of scope", "nothing selected in this narrowed run"),
        ("incomplete", "the run did not finish: no verdict"),
        ("not run", "the target was unreachable"),
    ]
    return '<p class="legend note">' + " ".join(f'{_badge(v)} {e(d)} &nbsp;' for v, d in items) + "</p>"


def _matrix(report: Mapping[str, Any]) -> str:
    specs = [t["spec"] for t in report["targets"]]
    head = ["KIP", *[f"<code>{e(s)}</code>" for s in specs], "requirements", "MUST", "no test"]
    rows = []
    for k in report["kips"]:
        cells = [
            f'<td><strong>{e(k["kip"])}</strong><br><span class="muted">{e(k.get("title"))}</span></td>'
        ]
        for s in specs:
            c = k["per_target"][s]
            counts = "".join(
                f"<span>{c[key]} {label}</span>" for key, label in CELL_COUNTS
                if c.get(key) or key in ("pass", "fail", "not_supported")
                or (key == "untested" and not c.get(OUT_OF_SCOPE))
            )
            title = ", ".join(f"{c.get(key, 0)} {label}" for key, label in CELL_COUNTS)
            total = sum(c.get(v, 0) for v in (*REQ_VERDICTS, OUT_OF_SCOPE))
            tested = total - c.get("untested", 0) - c.get(OUT_OF_SCOPE, 0)
            cells.append(
                f'<td class="cell {_cls(c["verdict"])}" title="{e(title)}">'
                f'<span class="word">{e(c["verdict"])}</span><span class="counts">{counts}</span>'
                + _must_line(k, s)
                + f'<span class="cover">{tested} of {total} requirements tested on this target</span></td>'
            )
        cells.append(f'<td class="num">{len(k["requirements"])}</td>')
        cells.append(f'<td class="num">{k.get("must_total", 0)}</td>')
        cells.append(f'<td class="num">{len(k["untested"])}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    h = "".join(f"<th>{c}</th>" for c in head)
    note = (
        '<p class="note">Rows: requirement catalogs; columns: targets. Counts are requirements: '
        "a requirement passes on a target only if every covering test that ran there passed; "
        "“not supported” and skipped tests never count as passes; “incomplete” means some covering "
        "tests passed and others were not supported or skipped. “no test” counts catalog requirements "
        "in scope that no test covers (a narrowed run leaves the rest out of scope). The MUST line counts only the KIP's MUST-level requirements "
        "(passed / failed / not supported / not tested).</p>"
    )
    return (
        '<h2 id="matrix">Per-KIP compliance matrix</h2>'
        + note
        + _legend()
        + _scroll(f'<table class="matrix"><thead><tr>{h}</tr></thead><tbody>{"".join(rows)}</tbody></table>')
        + '<h3>Requirements by verdict</h3>'
        + f'<div class="chartbox" id="chart-requirements">{charts.requirement_bars(report["kips"], specs)}</div>'
    )


def _must_line(k: Mapping[str, Any], spec: str) -> str:
    m = (k.get("must") or {}).get(spec)
    if not m or not k.get("must_total"):
        return ""
    not_tested = m.get("untested", 0) + m.get(OUT_OF_SCOPE, 0)
    return (f'<span class="must">MUST: {m["pass"]} passed · {m["fail"]} failed · {m["not_supported"]} not supported'
            + (f' · {m["incomplete"]} incomplete' if m.get("incomplete") else "")
            + f" · {not_tested} not tested (of {k['must_total']})</span>")


def _untested(report: Mapping[str, Any]) -> str:
    rows = []
    for k in report["kips"]:
        ids = k["untested"]
        listing = " ".join(f'<code class="rid">{e(i)}</code>' for i in ids) if ids else '<span class="muted">none</span>'
        if len(ids) > 12:
            listing = f"<details><summary>{len(ids)} ids</summary>{listing}</details>"
        rows.append([f"<strong>{e(k['kip'])}</strong>", str(len(ids)), str(len(k["requirements"])), listing])
    total = sum(len(k["untested"]) for k in report["kips"])
    outside = sum(len(k.get("out_of_scope") or ()) for k in report["kips"])
    scope = (f" A further {outside} lie outside this narrowed run's selection (out of scope, not counted here)."
             if outside else "")
    return (
        '<h2 id="untested">Untested requirements</h2>'
        f'<p class="note">Catalog requirements in scope that no test in this run covers on any target: '
        f'{total}.{scope}</p>'
        + _fold(f"{total} requirement ids by KIP", _table(["KIP", "untested", "of", "ids"], rows, num_cols={1, 2}))
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


def ev_anchor(nodeid: str, target: str) -> str:
    """The fragment id of a test result's evidence card."""
    return "ev-" + hashlib.sha1(f"{target}\0{nodeid}".encode()).hexdigest()[:12]


def _verdict_cell(pt: Mapping[str, Any], spec: str = "") -> str:
    v = pt["verdict"]
    tests = pt.get("tests") or []

    def test_dev(t: Mapping[str, Any]) -> str:
        dv = t.get("deviation") or {}
        if dv.get("status") == EXPECTED_FAILURE:
            return f" (known deviation {_dev_link(dv['id'])})"
        if dv.get("status") == UNEXPECTED_PASS:
            return f" ({_dev_link(dv['id'])} did not occur)"
        return ""

    # A test's reason is printed once, in its evidence card; here a link leads to it.
    items = "".join(
        f"<li>{_badge(t['verdict'])}{test_dev(t)} <code>{e(t['nodeid'])}</code>"
        + (f' <a href="#{ev_anchor(t["nodeid"], spec)}">evidence</a>' if t["verdict"] != "pass" and spec else "")
        + "</li>"
        for t in tests
    )
    detail = f'<ul class="tests">{items}</ul>' if items else f'<div class="why">{e(pt.get("reason"))}</div>'
    return (
        f'<td class="vcell"><details><summary>{_badge(v)}{_deviation_label(pt)}</summary>'
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
            + "".join(_verdict_cell(r["per_target"][s], s) for s in specs)
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
    n = len(report["requirements"])
    return (
        '<h2 id="requirements">Requirements</h2>'
        + '<p class="note">Every catalog requirement with its verdict per target and its covering tests; '
        "the evidence of each non-passing test is in the Evidence section above.</p>"
        + _fold(
            f"all {n} requirements",
            legend + toolbar
            + _scroll(f'<table class="reqs" id="reqs"><thead><tr>{h}</tr></thead><tbody>{"".join(body)}</tbody></table>'),
        )
    )


def _evidence(report: Mapping[str, Any]) -> str:
    items = report.get("non_passing") or []
    out = ['<h2 id="evidence">Evidence of every non-passing test</h2>']
    if not items:
        ran = report["summary"]["tests_total"] + (report.get("self_checks") or {}).get("tests_total", 0)
        return out[0] + ('<p class="note">Every test that ran passed.</p>' if ran else '<p class="note">No test ran.</p>')
    failing = [i for i in items if i["verdict"] in ("fail", "error")]
    rest = [i for i in items if i["verdict"] not in ("fail", "error")]
    out.append('<p class="note">For each test that did not pass: how its requirements are tested (the catalog '
               "oracle), what the test asserted, what the run captured (raw-client exchanges, the observation "
               "against the reference, the target's log) and its allure result file.</p>")
    out.extend(_evidence_card(i) for i in failing)
    if rest:
        out.append(_fold(f"{len(rest)} not supported or skipped", "".join(_evidence_card(i) for i in rest)))
    return "".join(out)


def _evidence_card(item: Mapping[str, Any]) -> str:
    label = "timed out" if item.get("timed_out") else item["verdict"]
    head = (f'{_badge("fail" if item.get("timed_out") else item["verdict"])}'
            + (f' <span class="tag">timed out after {e(item.get("deadline_s"))} s</span>' if item.get("timed_out") else "")
            + f' <code>{e(item["test"])}</code> on <code>{e(item["target"])}</code>')
    parts = [f'<div class="card-head">{head}</div>', f'<div class="muted nodeid">{e(item["nodeid"])}</div>']
    dv = item.get("deviation") or {}
    if dv.get("id"):
        parts.append(f'<div>registered deviation {_dev_link(dv["id"])} ({e(dv.get("status"))})</div>')
    reqs = item.get("requirements") or []
    if reqs:
        parts.append('<div class="sub-h">How it is tested</div><ul class="oracles">' + "".join(
            f'<li><code>{e(r["id"])}</code> <span class="level">{e(r.get("level") or "")}</span> — '
            f'{e(r.get("oracle") or "no oracle in the catalog")}</li>' for r in reqs) + "</ul>")
    ev = item.get("evidence") or {}
    if item.get("reason"):
        parts.append(f'<div class="sub-h">Result</div><pre class="ev">{e(item["reason"])}</pre>')
    if ev.get("assertion"):
        parts.append(f'<div class="sub-h">Assertion</div><pre class="ev">{e(ev["assertion"])}</pre>')
    if ev.get("observation"):
        parts.append(f'<div class="sub-h">Observation (target against reference)</div><pre class="ev">{e(ev["observation"])}</pre>')
    ex = ev.get("exchanges") or []
    if ex:
        rows = "".join(
            f'<div class="exch"><div class="muted">{e(x.get("api"))} (key {e(x.get("api_key"))}) v{e(x.get("version"))}'
            f' · node {e(x.get("node"))}</div><pre class="ev">→ {e(x.get("request"))}</pre>'
            f'<pre class="ev">← {e(x.get("response"))}</pre></div>'
            for x in ex
        )
        parts.append(_fold(f"last {len(ex)} raw-client exchange(s)", rows))
    if ev.get("log_tail"):
        where = f" ({e(ev.get('log_path'))})" if ev.get("log_path") else ""
        parts.append(_fold(f"target log, last {len(ev['log_tail'])} lines{where}",
                           f'<pre class="ev">{e(chr(10).join(ev["log_tail"]))}</pre>'))
    if item.get("allure"):
        parts.append(f'<div class="muted">allure result: <a href="{e(item["allure"])}">{e(item["allure"])}</a></div>')
    return (f'<div class="card {_cls(label.replace(" ", "-"))}-card" id="{ev_anchor(item["nodeid"], item["target"])}">'
            f'{"".join(parts)}</div>')


def _timeline(report: Mapping[str, Any]) -> str:
    tl = report.get("timeline") or {}
    svg = charts.timeline(tl)
    if not svg:
        return '<h2 id="timeline">Timeline</h2><p class="note">No test ran.</p>'
    source = {
        "rows": "from the result rows' start/stop times",
        "allure": "start/stop times from the allure result files",
        "sequential": "no start times recorded: each worker's tests laid end to end in the order it ran them",
    }.get(tl.get("source"), "")
    if tl.get("untimed"):
        source += f"; {tl['untimed']} result(s) without times are not drawn"
    return (f'<h2 id="timeline">Timeline</h2><p class="note">One lane per worker; one bar per test, coloured by '
            f"its verdict ({e(source)}). Hover a bar for the test.</p>"
            f'<div class="chartbox" id="chart-timeline">{svg}</div>')


def _self_checks(report: Mapping[str, Any]) -> str:
    sc = report.get("self_checks") or {}
    head = '<h2 id="self-checks">Self-checks of kipcheck (no target)</h2>'
    if not sc.get("tests_total"):
        return head + '<p class="note">No self-check ran in this run.</p>'
    c = sc.get("tests") or {}
    rows = [[f"<code>{e(r['nodeid'])}</code>", _badge(r["verdict"]), e(", ".join(r.get("requirements") or [])),
             e(r.get("reason") or "")] for r in sc.get("rows") or []]
    return (
        head
        + '<p class="note">These tests use no cluster: they check kipcheck\'s own oracle (the reference '
        "model against the catalog, the reference against itself). They certify nothing about any target "
        "and are not part of the matrix; a failing self-check still fails the run, because the oracle "
        "itself would then be in doubt.</p>"
        + f'<p class="selfcheck">{sc["tests_total"]} self-checks: {c.get("pass", 0)} passed, '
        f'{c.get("fail", 0) + c.get("error", 0)} failed, {c.get("not_supported", 0) + c.get("skipped", 0)} '
        f'not run; {len(sc.get("requirements") or [])} requirement ids exercised.</p>'
        + _fold("self-check results", _table(["test", "verdict", "requirements", "reason"], rows))
    )


def _deviations(report: Mapping[str, Any]) -> str:
    d = report.get("deviations") or {}
    register = list(d.get("register") or [])
    matched = list(d.get("matched") or [])
    out = ['<h2 id="deviations">Known target deviations</h2>']
    out.append(
        '<p class="note">Failures of a named target kind that have been observed and explained '
        "(registers/deviations/). The matching test runs as a strict expected failure: "
        "its verdict stays <strong>fail</strong> — a known deviation is still non-compliance — and "
        "when the target stops deviating the test fails as an unexpected pass until the entry is removed. "
        "A flaky entry (seen in some runs, with its rate) lets a run without the failure pass; an entry "
        "with a signature excuses only the failure it describes.</p>"
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
                f"<code>{e(g.get('test'))}</code>"
                + (f'<div class="muted">flaky: {e(g.get("flaky"))}</div>' if g.get("flaky") else "")
                + (f'<div class="muted">only a failure matching <code>{e(g.get("signature"))}</code></div>'
                   if g.get("signature") else ""),
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
        seen = sum(1 for ms in by_id.values() for m in ms)
        out.append(_fold(
            f"{len(rows)} register entries · {seen} matched in this run",
            _table(["id", "target", "requirement", "test", "observed", "evidence", "in this run"], rows, cls="devs"),
            open_=bool(matched),
        ))
    else:
        out.append('<p class="note">The deviation register is empty or missing.</p>')
    return "".join(out)


def _clients(report: Mapping[str, Any]) -> str:
    """Client libraries' own suites (reports/client_suites.py): counts per suite and target,
    then every row; a failing or errored row opens its output tail."""
    c = report.get("clients") or {}
    if not c.get("suites"):
        return ('<h2 id="clients">Client libraries</h2><p class="note">No client library\'s own suite ran '
                "(<code>kipcheck clients</code>, <code>certify --clients</code>; docs/clients.md).</p>")
    out = ['<h2 id="clients">Client libraries</h2>',
           '<p class="note">Client libraries\' own integration suites run against the targets '
           "(docs/clients.md): outside evidence, no KIP verdict is computed from them. A client's skip "
           "carries its own reason; a registered failure links to its deviation entry.</p>"]
    out.append(_table(["suite", "target", *(k.replace("_", " ") for k in COUNT_KEYS), "time"], [
        [f"{e(s['suite'])} {e(s['version'])}", f"<code>{e(s['target'])}</code>",
         *(str(s["counts"][k]) for k in COUNT_KEYS), _fmt_s(s["duration_s"])] for s in c["suites"]],
        num_cols=set(range(2, 2 + len(COUNT_KEYS) + 1))))
    rows = []
    for r in c.get("rows") or []:
        dv = r.get("deviation") or {}
        word = (f"({'registered' if dv['status'] == EXPECTED_FAILURE else 'unexpected pass'} {_dev_link(dv['id'])})"
                if dv else "")
        tail = (_fold("output", _val(r["output_tail"])) if r.get("output_tail") and r["verdict"] in ("fail", "error")
                else "")
        rows.append([f"<code>{e(r['nodeid'])}</code>", f"<code>{e(r['target'])}</code>",
                     _badge(r["verdict"], client_label(r)) + (f" {word}" if word else ""),
                     e(r.get("reason")) + tail, _fmt_s(r.get("duration_s"))])
    out.append(_fold(f"{len(rows)} client-suite tests", _table(["test", "target", "verdict", "reason", "time"], rows),
                     open_=any(r["verdict"] in ("fail", "error") for r in c.get("rows") or [])))
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
        out.append(_fold(f"{len(rows)} differences observed",
                         _table(["target", "test", "requirement", "what", "target's answer", "reference's answer"], rows)))
    else:
        out.append('<p class="note">No test reported a difference from the reference.</p>')
    out.append("<h3>Divergence register</h3>")
    register = d.get("register") or []
    if register:
        out.append(
            '<p class="note">Known places where Apache Kafka and the KIP text disagree, '
            "and what the reference does (registers/divergences.yaml).</p>"
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
        out.append(_fold(f"{len(rows)} register entries",
                         _table(["id", "requirement", "KIP text", "Apache Kafka", "reference", "evidence"], rows)))
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
    comp = report["summary"].get("completeness") or {}
    meta.append(f"<dt>completeness</dt><dd>{e(comp.get('text'))}</dd>")
    for label, value in (("reasons", "; ".join(comp.get("reasons") or [])),
                         ("worker crashes", "; ".join(comp.get("worker_crashes") or [])),
                         ("timed out", "; ".join(f"{t.get('nodeid')} on {t.get('target')} (deadline {t.get('deadline_s')} s)"
                                                 for t in run.get("timed_out") or [] if isinstance(t, Mapping)))):
        if value:
            meta.append(f"<dt>{e(label)}</dt><dd>{e(value)}</dd>")
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
