"""The soak's report: a text summary and a small self-contained HTML page whose timeline (inline
SVG) shows each fault as a tick on its kind's row and, where one was measured, the time until
what it broke was whole again as a bar."""

from __future__ import annotations

import html
import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any

from airflow_gpu.testing.soak.faults import KINDS, NOT_IMPLEMENTED, Fault
from airflow_gpu.testing.soak.invariants import Verdict


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def summary(
    seed: int, command: str, faults: Sequence[Fault], verdicts: Sequence[Verdict], figures: dict[str, Any]
) -> dict[str, Any]:
    recoveries = [f.recovered_at - f.at for f in faults if f.recovered_at is not None]
    return {
        "seed": seed,
        "command": command,
        "faults": len(faults),
        "by_kind": {k: Counter(f.kind for f in faults if f.outcome == "injected")[k] for k in KINDS},
        "skipped_by_kind": dict(Counter(f.kind for f in faults if f.outcome == "skipped")),
        "errors_by_kind": dict(Counter(f.kind for f in faults if f.outcome.startswith("error"))),
        "not_implemented": NOT_IMPLEMENTED,
        "recoveries": len(recoveries),
        "recover_p50": percentile(recoveries, 50),
        "recover_p99": percentile(recoveries, 99),
        "recover_mean": statistics.fmean(recoveries) if recoveries else None,
        "invariants": {v.name: {"checked": v.checked, "violations": len(v.violations)} for v in verdicts},
        **figures,
    }


def text(report: dict[str, Any], verdicts: Sequence[Verdict]) -> str:
    lines = [f"soak seed {report['seed']}: {report['faults']} faults in {report['wall_seconds']:.0f} s wall"]
    lines.append(f"  replay: {report['command']}")
    lines.append("faults by kind (injected / skipped: no target at that moment / error):")
    for kind, count in report["by_kind"].items():
        lines.append(
            f"  {kind:<22} {count:>4} / {report['skipped_by_kind'].get(kind, 0):>3} / "
            f"{report['errors_by_kind'].get(kind, 0):>3}"
        )
    for kind, why in report["not_implemented"].items():
        lines.append(f"  {kind:<22}    0  (not implemented: {why})")
    p50, p99 = report["recover_p50"], report["recover_p99"]
    lines.append(
        f"recoveries measured: {report['recoveries']}; time to recover p50 "
        f"{'-' if p50 is None else f'{p50:.1f} s'}, p99 {'-' if p99 is None else f'{p99:.1f} s'}"
    )
    lines.append(f"runs: {report['runs']} ({report['run_states']}); task instances {report['task_states']}")
    lines.append(f"API requests: Kubernetes {report['k8s_requests']}, Batch {report['batch_requests']}")
    lines.append(f"supervisor restarts (parts that exited on their own): {report['supervisor_restarts']}")
    lines.append(f"forced orphan found by airflow-gpu reap: {report['forced_orphan_found']}")
    held = report.get("held_released_by_reap") or []
    lines.append(f"ended pods still held by the provider's finalizer, let go by airflow-gpu reap: {len(held)}"
                 + (f" ({', '.join(held)})" if held else ""))  # fmt: skip
    stranded = report.get("stranded_by_a_mark") or []
    lines.append(f"left by a mark while the try's trigger ran nowhere (Airflow's gap), found by reap: {len(stranded)}")
    lines += [f"  {line}" for line in stranded]
    lines.append("invariants:")
    for v in verdicts:
        lines.append(f"  {'ok ' if v.ok else 'BAD'} {v.name}: {v.checked} checked, {len(v.violations)} violation(s)")
        lines += [f"      {line}" for line in v.violations[:20]]
    return "\n".join(lines)


def page(report: dict[str, Any], faults: Sequence[Fault], verdicts: Sequence[Verdict], start: float) -> str:
    kinds = list(KINDS)
    width, row = 900.0, 16
    span = max(report["wall_seconds"], 1.0)
    label = 170
    height = row * len(kinds) + 30
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{label + width + 10:.0f}" height="{height}">']
    for i, kind in enumerate(kinds):
        y = 10 + i * row
        svg.append(f'<text x="0" y="{y + 11}" font-size="11">{html.escape(kind)}</text>')
        svg.append(f'<line x1="{label}" y1="{y + 8}" x2="{label + width}" y2="{y + 8}" stroke="#eee"/>')
    for f in faults:
        y = 10 + kinds.index(f.kind) * row
        x = label + (f.at - start) / span * width
        color = {"injected": "#c0392b", "skipped": "#bbb"}.get(f.outcome, "#8e44ad")
        if f.recovered_at is not None:
            w = max((f.recovered_at - f.at) / span * width, 1)
            svg.append(f'<rect x="{x:.1f}" y="{y + 5}" width="{w:.1f}" height="6" fill="#27ae60" opacity="0.5"/>')
        title = html.escape(f.line())
        svg.append(f'<rect x="{x:.1f}" y="{y + 2}" width="2" height="12" fill="{color}"><title>{title}</title></rect>')
    svg.append(f'<text x="{label}" y="{row * len(kinds) + 25}" font-size="11">0 s</text>')
    svg.append(f'<text x="{label + width - 40}" y="{row * len(kinds) + 25}" font-size="11">{span:.0f} s</text>')
    svg.append("</svg>")
    rows = "".join(
        f"<tr><td>{'ok' if v.ok else '<b>VIOLATED</b>'}</td><td>{html.escape(v.name)}</td><td>{v.checked}</td>"
        f"<td>{len(v.violations)}</td></tr>"
        for v in verdicts
    )
    kinds_rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{c}</td></tr>" for k, c in report["by_kind"].items())
    title = f"airflow-gpu soak, seed {report['seed']}"
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:sans-serif;margin:1em}}td{{padding:0 .6em}}</style></head><body>
<h1>Soak, seed {report["seed"]}</h1>
<p>{report["faults"]} faults in {report["wall_seconds"]:.0f} s; replay:
<code>{html.escape(report["command"])}</code></p>
<h2>Timeline</h2><p>red: a fault; grey: no target at its moment; green: until recovered.</p>{"".join(svg)}
<h2>Invariants</h2><table><tr><th></th><th>invariant</th><th>checked</th><th>violations</th></tr>{rows}</table>
<h2>Faults by kind</h2><table><tr><th>kind</th><th>injected</th></tr>{kinds_rows}</table>
<pre>{html.escape(text(report, verdicts))}</pre></body></html>"""
