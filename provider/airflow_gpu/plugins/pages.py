"""The report's HTML pages: one task instance, a mapped task's index, a whole DAG run.

Pages are complete documents with their CSS inline and charts as inline SVG (``charts``), made
to sit in the Airflow UI's tab iframe and to work without JavaScript. Every string from a DAG
author or a workload (ids, GPU names, notes, advice, UUIDs) goes through ``html.escape``; a link
taken from a document is written only when it is http(s). Links between pages are absolute
paths under ``base``, the path the app is mounted at. Pure: no Airflow, no FastAPI.

Airflow 3.3.2 frames a tab with ``sandbox="allow-scripts allow-same-origin allow-forms
allow-downloads"``: links between the report's pages navigate the frame, same origin, signed in,
but a ``target="_blank"`` link opens nothing (no ``allow-popups``). So a page rendered ``framed``
(the app knows from ``Sec-Fetch-Dest: iframe``) shows a document's outside address as text to
copy, and the page opened on its own links it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from html import escape
from typing import Any

from airflow_gpu.plugins import charts
from airflow_gpu.plugins.document import (
    RunEntry,
    gpu_labels,
    interruption_count,
    is_profile,
    items,
    mapping,
    number,
    series,
    spark,
    text,
)
from airflow_gpu.plugins.urls import run_path, task_path

DASH = "\u2013"  # an en dash: no value
#: Why a task instance may have no profile: shown on the empty state.
NO_PROFILE = (
    "Only GPUKubernetesOperator and GPUBatchOperator tasks with gpu_profile=True record a GPU profile, "
    "when the task ends: this task is not one of them, ran with gpu_profile=False, or has not finished yet."
)
#: After an outside address on a page inside the Airflow tab, which cannot open it.
FRAMED_LINK = "(copy the address into a new browser tab: links to other sites cannot open inside the Airflow tab)"
_CSS = """
:root{color-scheme:light dark;--fg:#1a202c;--muted:#5a6478;--line:#d8dde6;--card:#f5f7fa;--bg:#fff}
@media (prefers-color-scheme:dark){:root{--fg:#e2e8f0;--muted:#a0aec0;--line:#3a4252;--card:#1f2530;--bg:#151a22}}
body{font:14px/1.45 system-ui,sans-serif;color:var(--fg);background:var(--bg);margin:16px 20px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:22px 0 8px}
a{color:#2b6cb0}.meta{color:var(--muted);margin:0}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:14px 0}
.card{background:var(--card);border-radius:6px;padding:8px 12px;min-width:120px}
.card b{display:block;font-size:18px}.card span{color:var(--muted);font-size:12px}
.empty{background:var(--card);border-left:4px solid #d69e2e;padding:10px 14px;border-radius:4px}
table{border-collapse:collapse;margin:6px 0}th,td{border-bottom:1px solid var(--line);padding:4px 8px;text-align:left}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}tr.group th{background:var(--card)}
code{font-size:12px}code.copy{user-select:all}.advice li{margin:4px 0}
.chart{margin:10px 0;max-width:760px}.chart figcaption{font-weight:600}
.chart svg{width:100%;height:auto}.axis line{stroke:var(--line)}.axis text{fill:var(--muted);font-size:11px}
path{fill:none;stroke-width:1.5}.spark path{stroke-width:1.2}
.legend{list-style:none;padding:0;margin:4px 0;display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12px}
.swatch{display:inline-block;width:14px;height:3px;margin-right:5px;vertical-align:middle}
.s0{stroke:#3182ce;background:#3182ce}.s1{stroke:#dd6b20;background:#dd6b20}.s2{stroke:#38a169;background:#38a169}
.s3{stroke:#e53e3e;background:#e53e3e}.s4{stroke:#805ad5;background:#805ad5}.s5{stroke:#d69e2e;background:#d69e2e}
.s6{stroke:#319795;background:#319795}.s7{stroke:#d53f8c;background:#d53f8c}
"""


def _e(value: Any) -> str:
    """Any value as escaped text (None as a dash)."""
    return DASH if value is None else escape(str(value))


def fmt(value: Any, unit: str = "", digits: int = 1) -> str:
    """A number with ``digits`` decimals and its unit, or a dash (already HTML-safe)."""
    v = number(value)
    return DASH if v is None else f"{v:,.{digits}f}{unit}"


def fmt_energy(wh: Any) -> str:
    v = number(wh)
    if v is None:
        return DASH
    return f"{v / 1000:,.2f} kWh" if v >= 1000 else f"{v:,.1f} Wh"


def fmt_usd(usd: Any) -> str:
    v = number(usd)
    return DASH if v is None else f"${v:,.2f}"


def fmt_mib(mib: Any) -> str:
    v = number(mib)
    return DASH if v is None else f"{v / 1024:,.1f} GiB"


def fmt_duration(seconds: Any) -> str:
    v = number(seconds)
    if v is None:
        return DASH
    total = round(v)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def fmt_time(epoch: Any) -> str:
    v = number(epoch)
    if v is None:
        return DASH
    try:
        return datetime.fromtimestamp(v, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return DASH


def _link(href: str, label: str) -> str:
    """A link to one of the report's own pages (``href`` built from quoted ids, ``label`` escaped here)."""
    return f'<a href="{escape(href)}">{escape(label)}</a>'


def _external_link(url: Any, framed: bool = False) -> str:
    """A document's URL as a link when it is http(s), else as text: never a ``javascript:`` link.

    ``framed``: as text to copy, since the UI's sandboxed tab frame blocks the new window a
    ``target="_blank"`` link opens (and a site elsewhere would refuse to load inside the frame).
    """
    value = text(url)
    if value is None:
        return DASH
    if value.startswith(("https://", "http://")):
        if framed:
            return f'<code class="copy">{escape(value)}</code> <span class="meta">{escape(FRAMED_LINK)}</span>'
        return f'<a href="{escape(value)}" target="_blank" rel="noopener noreferrer">{escape(value)}</a>'
    return escape(value)


def page(title: str, body: str) -> str:
    """A whole HTML document; ``title`` is escaped, ``body`` is HTML already made safe."""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>{body}</body></html>"
    )


def _cards(pairs: Sequence[tuple[str, str]]) -> str:
    """Figure cards; the values are HTML-safe already (from the ``fmt`` helpers or ``_e``)."""
    inner = "".join(f'<div class="card"><b>{value}</b><span>{escape(label)}</span></div>' for label, value in pairs)
    return f'<div class="cards">{inner}</div>'


def _dl(rows: Sequence[tuple[str, str]]) -> str:
    """A two-column table of labels and HTML-safe values."""
    return "<table>" + "".join(f"<tr><th>{escape(k)}</th><td>{v}</td></tr>" for k, v in rows) + "</table>"


def _task_header(dag_id: str, run_id: str, task_id: str, map_index: int | None, base: str) -> str:
    shard = "" if map_index is None or map_index < 0 else f" [{map_index}]"
    return (
        f"<h1>GPU profile: {escape(task_id)}{shard}</h1>"
        f'<p class="meta">DAG {escape(dag_id)} · run {escape(run_id)} · '
        f"{_link(base + run_path(dag_id, run_id), 'the whole run')} · "
        f"{_link(base + task_path(dag_id, run_id, task_id, map_index, api=True), 'JSON')}</p>"
    )


def missing_page(dag_id: str, run_id: str, task_id: str, map_index: int | None, base: str) -> str:
    """No ``gpu_profile`` in XCom for this task instance: the empty state, never an error."""
    body = _task_header(dag_id, run_id, task_id, map_index, base) + (
        f'<div class="empty"><p><b>No GPU profile for this task instance.</b></p><p>{escape(NO_PROFILE)}</p></div>'
    )
    return page(f"GPU profile: {task_id}", body)


def map_index_page(dag_id: str, run_id: str, task_id: str, map_indexes: Sequence[int], base: str) -> str:
    """A mapped task opened without a map index: its profiled instances, one link each."""
    links = "".join(
        f"<li>{_link(base + task_path(dag_id, run_id, task_id, i), f'{task_id} [{i}]')}</li>" for i in map_indexes
    )
    body = (
        _task_header(dag_id, run_id, task_id, None, base)
        + f"<p>{len(map_indexes)} mapped instances of this task have a GPU profile:</p><ul>{links}</ul>"
    )
    return page(f"GPU profile: {task_id}", body)


def _summary_table(document: Mapping[str, Any]) -> str:
    rows = []
    for entry in items(document.get("summary")):
        s = mapping(entry)
        idle = number(s.get("idle_fraction"))
        source = text(s.get("energy_source"))
        # A MIG slice: NVML's power and energy are the whole GPU's, never to be read as the slice's.
        scope = "the whole GPU's, not this MIG slice's" if s.get("energy_scope") == "gpu" else ""
        said = "; ".join(part for part in (source, scope) if part)
        rows.append(
            f"<tr><td>{_e(text(s.get('gpu')))}</td><td>{_e(text(s.get('name')))}</td>"
            f"<td><code>{_e(text(s.get('uuid')))}</code></td><td class=n>{fmt(s.get('samples'), digits=0)}</td>"
            f"<td class=n>{fmt(s.get('util_mean'), '%')}</td><td class=n>{fmt(s.get('util_p95'), '%')}</td>"
            f"<td class=n>{fmt(None if idle is None else idle * 100, '%', 0)}</td>"
            f"<td class=n>{fmt_mib(s.get('fb_peak'))} / {fmt_mib(s.get('fb_total'))}</td>"
            f"<td class=n>{fmt(s.get('power_mean'), ' W', 0)} / {fmt(s.get('power_peak'), ' W', 0)}"
            f"{f' ({escape(scope)})' if scope else ''}</td>"
            f"<td class=n>{fmt_energy(s.get('energy_wh'))}{f' ({escape(said)})' if said else ''}</td></tr>"
        )
    if not rows:
        return ""
    head = (
        "<tr><th>GPU</th><th>Name</th><th>UUID</th><th class=n>Samples</th><th class=n>Util mean</th>"
        "<th class=n>Util p95</th><th class=n>Idle</th><th class=n>Memory peak / total</th>"
        "<th class=n>Power mean / peak</th><th class=n>Energy</th></tr>"
    )
    return f"<h2>Per GPU</h2><table>{head}{''.join(rows)}</table>"


def _charts(document: Mapping[str, Any], bound: int | None) -> str:
    lines = series(document, ("gpu_util", "fb_used", "power_usage"))
    if not lines:
        return ""
    labels = gpu_labels(document)
    start, end = number(document.get("started")), number(document.get("ended"))
    totals = [number(mapping(g).get("fb_total")) for g in items(document.get("gpus"))]
    memory_top = max((t for t in totals if t is not None), default=None)

    def lines_of(field: str, scale: float = 1.0) -> list[charts.Series]:
        return [
            charts.Series(
                labels.get(s.gpu, f"GPU {s.gpu}"),
                s.times,
                [None if v is None else v * scale for v in s.values[field]],
            )
            for s in lines
        ]

    points = number(document.get("series_points"))
    caption = f" ({int(points)} points per GPU at most)" if points is not None else ""
    return (
        f"<h2>Over time{escape(caption)}</h2>"
        + charts.line_chart(
            "GPU utilisation", "%", lines_of("gpu_util"), start=start, end=end, y_at_least=100.0, bound=bound
        )
        + charts.line_chart(
            "Memory used",
            "GiB",
            lines_of("fb_used", 1 / 1024),
            start=start,
            end=end,
            y_at_least=0.0 if memory_top is None else memory_top / 1024,
            bound=bound,
            peak=True,
        )
        + charts.line_chart("Power", "W", lines_of("power_usage"), start=start, end=end, bound=bound)
    )


def _advice(document: Mapping[str, Any]) -> str:
    entries = [mapping(a) for a in items(document.get("advice"))]
    lis = "".join(
        f"<li><b>{_e(text(a.get('kind')))}</b>: {_e(text(a.get('message')))}</li>"
        for a in entries
        if text(a.get("message"))
    )
    return f'<h2>Advice</h2><ul class="advice">{lis}</ul>' if lis else ""


def _cost(document: Mapping[str, Any], framed: bool) -> str:
    cost = mapping(document.get("cost"))
    if not cost:
        if document.get("empty"):
            return ""
        why = text(document.get("cost_note")) or "no list price is known for this task's instance type and capacity"
        return f"<h2>Cost</h2><p>No estimate: {escape(why)}.</p>"
    rate = number(cost.get("usd_per_hour"))
    return "<h2>Cost</h2>" + _dl(
        [
            ("Estimated cost", fmt_usd(cost.get("usd"))),
            ("Basis", _e(text(cost.get("basis")))),
            ("Rate", DASH if rate is None else f"${rate:,.3f} per hour"),
            ("Instance type", _e(text(cost.get("instance_type")))),
            ("Capacity", _e(text(cost.get("capacity")))),
            ("List prices of", _e(text(cost.get("prices_date")))),
            ("Source", _external_link(cost.get("source"), framed)),
        ]
    )


def _run_facts(document: Mapping[str, Any]) -> str:
    signals = ", ".join(str(s) for s in items(document.get("signals")) if text(s)) or None
    points = number(document.get("series_points"))
    return "<h2>Run</h2>" + _dl(
        [
            ("Backend", _e(text(document.get("backend")))),
            ("Workload", f"<code>{_e(text(document.get('workload')))}</code>"),
            ("Accelerator", _e(text(document.get("accelerator")))),
            ("Capacity", _e(text(document.get("capacity")))),
            ("Instance type", _e(text(document.get("instance_type")))),
            ("Started", fmt_time(document.get("started"))),
            ("Ended", fmt_time(document.get("ended"))),
            ("Exit code", fmt(document.get("exit_code"), digits=0)),
            ("Signals forwarded", _e(signals)),
            ("Spot interruption notice", _e(text(document.get("spot_notice")))),
            ("Profiler", _e(text(document.get("source")))),
            ("Sampling interval", fmt(document.get("interval"), " s", 1)),
            ("Samples taken", fmt(document.get("samples_taken"), digits=0)),
            ("Series bound", DASH if points is None else f"{int(points)} points per GPU"),
        ]
    )


def _mig(value: Any) -> str:
    return "on" if value is True else "off" if value is False else DASH


def _environment(document: Mapping[str, Any]) -> str:
    out = "<h2>Driver and topology</h2>" + _dl(
        [("Driver", _e(text(document.get("driver")))), ("CUDA", _e(text(document.get("cuda"))))]
    )
    gpus = [mapping(g) for g in items(document.get("gpus"))]
    if gpus:
        out += (
            "<table><tr><th>GPU</th><th>Name</th><th>UUID</th><th>PCI</th><th>MIG</th><th class=n>Memory</th></tr>"
            + "".join(
                f"<tr><td>{_e(text(g.get('index')))}</td><td>{_e(text(g.get('name')))}</td>"
                f"<td><code>{_e(text(g.get('uuid')))}</code></td><td><code>{_e(text(g.get('pci')))}</code></td>"
                f"<td>{_mig(g.get('mig'))}</td>"
                f"<td class=n>{fmt_mib(g.get('fb_total'))}</td></tr>"
                for g in gpus
            )
            + "</table>"
        )
    topology = mapping(document.get("topology"))
    names = [text(n) or "" for n in items(topology.get("gpus"))]
    matrix = [items(row) for row in items(topology.get("matrix"))]
    if names and matrix:
        head = "<tr><th></th>" + "".join(f"<th>{escape(n)}</th>" for n in names) + "</tr>"
        body = "".join(
            f"<tr><th>{escape(names[i]) if i < len(names) else ''}</th>"
            + "".join(f"<td>{_e(text(cell))}</td>" for cell in row)
            + "</tr>"
            for i, row in enumerate(matrix)
        )
        out += f"<p>Topology (as <code>nvidia-smi topo -m</code>):</p><table>{head}{body}</table>"
    return out


def task_page(
    value: Any,
    *,
    dag_id: str,
    run_id: str,
    task_id: str,
    map_index: int,
    base: str,
    interruptions: Any = None,
    chart_points: int | None = charts.MAX_POINTS,
    framed: bool = False,
) -> str:
    """One task instance's profile: figures, advice, per-GPU table, charts, cost, run facts, environment.

    ``value`` is the XCom value as read (any shape); ``interruptions`` the ``gpu_interruptions``
    records when there are some. An empty profile shows its note instead of the charts.
    ``chart_points`` bounds each chart line (None draws every point: the bench's naive baseline).
    ``framed``: the page sits in the UI's tab frame (outside addresses as text, see the module).
    """
    header = _task_header(dag_id, run_id, task_id, map_index, base)
    if not is_profile(value):
        note = "The gpu_profile XCom of this task instance is not a GPU profile document (version 1)"
        if isinstance(value, str):
            note += ": a custom XCom backend may keep only a reference to it in the database"
        note += "."
        return page(f"GPU profile: {task_id}", header + f'<div class="empty"><p>{escape(note)}</p></div>')
    doc = mapping(value)
    cost = mapping(doc.get("cost"))
    body = header + _cards(
        [
            ("GPU-hours", fmt(doc.get("gpu_hours"), digits=2)),
            ("duration", fmt_duration(doc.get("duration_s"))),
            ("mean utilisation", fmt(doc.get("util_mean"), "%")),
            ("energy", fmt_energy(doc.get("energy_wh"))),
            ("estimated cost", fmt_usd(cost.get("usd"))),
            ("interruptions", str(interruption_count(doc, interruptions))),
            ("accelerator", _e(text(doc.get("accelerator")))),
        ]
    )
    profiler_note = text(doc.get("note"))
    if doc.get("empty"):
        body += (
            '<div class="empty"><p><b>This task ran without a GPU profile: '
            f"{escape(profiler_note or 'no samples were taken')}.</b></p>"
            "<p>The figures above are what the operator knew without samples.</p></div>"
        )
    elif profiler_note:
        body += f'<div class="empty"><p>Note from the profiler: {escape(profiler_note)}.</p></div>'
    body += _advice(doc) + _summary_table(doc) + _charts(doc, chart_points)
    body += _cost(doc, framed) + _run_facts(doc) + _environment(doc)
    return page(f"GPU profile: {task_id}", body)


def run_page(rollup: Mapping[str, Any], entries: Sequence[RunEntry], base: str, *, framed: bool = False) -> str:
    """A DAG run: totals over every profiled task instance, then one row per task instance (mapped ones grouped).

    Drawn from the instances' summaries only (``document.profile_summary``); each row's sparkline
    from the summary's slices. ``framed``: the page sits in the UI's tab frame (outside addresses
    as text, see the module).
    """
    dag_id, run_id = str(rollup["dag_id"]), str(rollup["run_id"])
    totals = mapping(rollup.get("totals"))
    rows = [mapping(r) for r in items(rollup.get("tasks"))]
    header = (
        f"<h1>GPU profile: run {escape(run_id)}</h1><p class=meta>DAG {escape(dag_id)} · "
        f"{_link(base + run_path(dag_id, run_id, api=True), 'JSON')}</p>"
    )
    if not rows:
        body = header + (
            '<div class="empty"><p><b>No task instance of this run has a GPU profile.</b></p>'
            f"<p>{escape(NO_PROFILE)}</p></div>"
        )
        return page(f"GPU profile: {run_id}", body)
    profiled = int(number(totals.get("task_instances")) or 0)
    energy_n, cost_n = totals.get("energy_task_instances"), totals.get("cost_task_instances")
    body = header + _cards(
        [
            ("GPU-hours", fmt(totals.get("gpu_hours"), digits=2)),
            (f"energy ({energy_n} of {profiled} task instances)", fmt_energy(totals.get("energy_wh"))),
            (f"estimated cost ({cost_n} of {profiled} task instances)", fmt_usd(totals.get("cost_usd"))),
            ("mean utilisation, by GPU-hours", fmt(totals.get("util_mean"), "%")),
            ("interruptions", fmt(totals.get("interruptions"), digits=0)),
            ("task instances profiled", str(profiled)),
        ]
    )
    prices = [mapping(p) for p in items(rollup.get("prices"))]
    if prices:
        body += "<p class=meta>Costs from list prices: " + "; ".join(
            f"{_e(text(p.get('prices_date')))}, {_external_link(p.get('source'), framed)}" for p in prices
        )
        body += "</p>"
    from_documents = int(number(rollup.get("summarised_from_documents")) or 0)
    if from_documents:
        body += (
            f"<p class=meta>{from_documents} of these task instances have no stored summary (profiled by an "
            "older airflow-provider-gpu): their full profiles were read to draw this page, which is slower.</p>"
        )
    summaries = {(e.task_id, e.map_index): e.summary for e in entries}
    head = (
        "<tr><th>Task</th><th>Accelerator</th><th>Capacity</th><th class=n>Duration</th><th class=n>GPU-hours</th>"
        "<th class=n>Util mean</th><th>Utilisation</th><th class=n>Energy</th><th class=n>Cost</th>"
        "<th class=n>Interruptions</th><th>Notes</th></tr>"
    )
    table: list[str] = []
    by_task: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_task.setdefault(str(row["task_id"]), []).append(row)
    for task_id, group in by_task.items():
        mapped = any(int(r["map_index"]) >= 0 for r in group)
        if mapped:
            hours = sum(number(r.get("gpu_hours")) or 0.0 for r in group)
            table.append(
                f'<tr class="group"><th colspan="11">{escape(task_id)}: {len(group)} mapped instances, '
                f"{hours:,.2f} GPU-hours</th></tr>"
            )
        for row in group:
            index = int(row["map_index"])
            label = f"{task_id} [{index}]" if index >= 0 else task_id
            note = text(row.get("note")) if row.get("empty") or not row.get("profiled") else None
            advice = int(number(row.get("advice")) or 0)
            notes = "; ".join(n for n in (note, f"{advice} advice" if advice else None) if n)
            table.append(
                f"<tr><td>{_link(base + task_path(dag_id, run_id, task_id, index), label)}</td>"
                f"<td>{_e(row.get('accelerator'))}</td><td>{_e(row.get('capacity'))}</td>"
                f"<td class=n>{fmt_duration(row.get('duration_s'))}</td>"
                f"<td class=n>{fmt(row.get('gpu_hours'), digits=2)}</td>"
                f"<td class=n>{fmt(row.get('util_mean'), '%')}</td>"
                f"<td>{charts.spark_svg(*spark(summaries.get((task_id, index))))}</td>"
                f"<td class=n>{fmt_energy(row.get('energy_wh'))}</td>"
                f"<td class=n>{fmt_usd(row.get('cost_usd'))}</td>"
                f"<td class=n>{fmt(row.get('interruptions'), digits=0)}</td>"
                f"<td>{_e(notes or None)}</td></tr>"
            )
    body += f"<h2>Task instances</h2><table>{head}{''.join(table)}</table>"
    return page(f"GPU profile: {run_id}", body)


def framed_sign_in_page(address: str, where: str) -> str:
    """What a framed request that Airflow answered 401 shows instead of ``{"detail": "Not authenticated"}``.

    A frame sandboxed without ``allow-same-origin`` (Airflow's own default for a view, ``allow-forms``,
    which 3.3.2 overrides for plugin tabs) has an opaque origin: a link followed inside it is a
    cross-site request, which the browser sends without the SameSite=Lax ``_token`` cookie. The
    same happens once the session has expired. The page names where the Airflow UI shows the same
    report (``where``, plain text) and gives the ``address`` to open in a browser tab of its own.
    """
    body = (
        "<h1>GPU profile</h1>"
        '<div class="empty"><p><b>This page cannot open inside the Airflow tab: the browser did not send '
        "your Airflow sign-in with it.</b></p>"
        "<p>Browsers leave the sign-in out of pages opened from inside some sandboxed frames, and Airflow "
        "refuses it once the session has expired.</p>"
        f"<p>In the Airflow UI, open {escape(where)}, or copy this address into a new browser tab: "
        f'<code class="copy">{escape(address)}</code></p></div>'
    )
    return page("GPU profile: sign-in needed", body)
