"""A stored run as a self-contained HTML timeline.

One row per call on a shared time axis, each bar split into what the call was doing:
waiting for its inputs, waiting for approval, queued for a slot, running. The model's
streaming has its own lane at the top, so calls visibly start while it still writes.
Hovering a call shows the arrows to the calls it waited on and those that waited on it;
errors are marked and explained in the tooltip. Everything (styles, script) is inline:
the page opens offline and can be attached to a bug report as one file.

It reads only the store (the `calls` rows and the journal), never the agent, so
`tickloop trace RUN --html out.html` works without the code that ran the run.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from typing import Any

from .._core._media import IMAGE_TYPES, media_refs
from .._core._paths import untag_kind
from .._core._status import ERROR_STATUSES, CallStatus
from ._records import CallInfo, RunInfo
from ._tree_order import in_tree_order

__all__ = ["GuardrailVerdict", "guardrail_verdicts", "render_run", "run_origin"]

_LABEL = 230  # px of the label column
_PLOT = 860  # px of the time axis
_ROW = 26
_BAR = 14
_TOP = 64  # room for the axis

_STATUS_COLOURS: dict[str, str] = {
    CallStatus.DONE: "#2f6fd6",
    CallStatus.FAILED: "#d33a2c",
    CallStatus.INVALID: "#d33a2c",
    CallStatus.DENIED: "#e07b12",
    CallStatus.SKIPPED: "#9aa3ad",
}


@dataclass(slots=True)
class _Request:
    iteration: int
    start: float
    end: float | None = None
    cut_off: bool = False
    retries: int = 0
    worker: str | None = None  # the worker that ran it (Temporal)


@dataclass(frozen=True, slots=True)
class GuardrailVerdict:
    """One guardrail verdict a run's journal holds (PROTOCOL §15): `call` is the call's
    full id, or None for a run's input or output; `run` the path of the run it is of."""

    at: float
    run: str
    call: str | None
    guardrail: str
    kind: str
    verdict: str
    reason: str | None


def guardrail_verdicts(journal: list[tuple[int, float, str, Any]]) -> list[GuardrailVerdict]:
    """Every guardrail verdict journaled in a run (its `guardrail` notes), in order, a
    sub-agent's too; what `tickloop trace` lists and the timeline marks."""
    found: list[GuardrailVerdict] = []
    for _, at, tagged, body in journal:
        kind, where = untag_kind(tagged)
        if kind != "note" or not isinstance(body, dict) or body.get("note") != "guardrail":
            continue
        call_id = body.get("call_id")
        reason = body.get("reason")
        found.append(
            GuardrailVerdict(
                at,
                str(where),
                None if call_id is None else where.full(str(call_id)),
                str(body.get("guardrail")),
                str(body.get("kind")),
                str(body.get("verdict")),
                None if reason is None else str(reason),
            )
        )
    return found


_RESUMED_LABEL_WIDTH = 56  # px: "resumed" at the label's 11px font, with a margin


def render_run(
    run: RunInfo,
    calls: list[CallInfo],
    journal: list[tuple[int, float, str, Any]],
    media: Callable[[str], tuple[str, bytes] | None] | None = None,
) -> str:
    """One run as one HTML page (a string), from what a store holds of it; `media` reads
    the bytes of the images and audio its calls returned (the store's), shown below the
    timeline as data URLs."""
    requests, resumes = _requests(journal)
    page = _render(run, in_tree_order(calls), requests, resumes, journal)
    origin = run_origin(run, calls, journal)
    below = _verdict_section(guardrail_verdicts(journal), origin) + _media_section(journal, media)
    return page.replace(_MEDIA_SLOT, below, 1)


def _verdict_section(verdicts: list[GuardrailVerdict], origin: float) -> str:
    """The run's guardrail verdicts as a table, in the order they were given."""
    if not verdicts:
        return ""
    rows = "".join(
        f'<tr class="verdict {escape(v.verdict)}"><td>{v.at - origin:.3f}s</td>'
        f"<td>{escape(v.guardrail)}</td><td>{escape(v.kind)}</td>"
        f"<td>{escape(v.call or (v.run + ' ' if v.run else '') + 'run')}</td>"
        f"<td>{escape(v.verdict)}</td><td>{escape(v.reason or '')}</td></tr>"
        for v in verdicts
    )
    return (
        '<h2>Guardrails</h2><table class="verdicts"><tr><th>at</th><th>guardrail</th>'
        "<th>kind</th><th>of</th><th>verdict</th><th>reason</th></tr>" + rows + "</table>"
    )


def _verdict_marks(verdicts: list[GuardrailVerdict], index: dict[str, int], x: Any) -> str:
    """A diamond for each verdict: on its call's row, else on the row of the run it is
    of (the model lane for the root's input and output; a sub-agent's agent call)."""
    parts: list[str] = []
    for v in verdicts:
        where = v.call if v.call is not None else v.run
        row = index[where] + 1 if where in index else 0
        cx, cy = x(v.at), _y(row) + _ROW / 2
        tip = f"guardrail {v.guardrail} ({v.kind}): {v.verdict}"
        tip += f" — {v.reason}" if v.reason else ""
        parts.append(
            f'<g class="verdict {escape(v.verdict)}" data-guardrail="{escape(v.guardrail)}">'
            f'<path d="M{cx:.1f} {cy - 6:.1f} l6 6 l-6 6 l-6 -6 z"/>'
            f"<title>{escape(tip)}</title></g>"
        )
    return "".join(parts)


_MEDIA_SLOT = "<!--media-->"
# A MIME type safe to put in a data URL as it is; any other is shown as text only.
_SAFE_MIME = re.compile(r"(image|audio)/[a-z0-9][a-z0-9.+-]{0,60}")


def _media_section(
    journal: list[tuple[int, float, str, Any]],
    media: Callable[[str], tuple[str, bytes] | None] | None,
) -> str:
    """Each image or audio clip a call's result holds (`$media`), once, with the call."""
    figures: list[str] = []
    seen: set[str] = set()
    for _, _, tagged, body in journal:
        kind, where = untag_kind(tagged)
        if kind != "event" or not isinstance(body, dict) or body.get("type") != "CallFinished":
            continue
        call_id = where.full(str(body.get("call_id")))
        for ref in media_refs(body.get("value")):
            if ref["$media"] in seen:
                continue
            seen.add(ref["$media"])
            figures.append(_figure(call_id, ref, media))
    if not figures:
        return ""
    return '<h2>Media</h2><div class="media">' + "".join(figures) + "</div>"


def _figure(
    call_id: str, ref: dict[str, Any], media: Callable[[str], tuple[str, bytes] | None] | None
) -> str:
    mime, media_id = str(ref.get("mime")), str(ref["$media"])
    caption = escape(f"{call_id} · {media_id} · {mime} · {ref.get('bytes')} bytes")
    found = media(media_id) if media is not None else None
    shown = ""
    if found is not None and _SAFE_MIME.fullmatch(found[0]):
        url = escape(f"data:{found[0]};base64,{base64.b64encode(found[1]).decode('ascii')}")
        if found[0].startswith(IMAGE_TYPES):
            shown = f'<img src="{url}" alt="{escape(media_id)}">'
        else:
            shown = f'<audio controls src="{url}"></audio>'
    elif found is None:
        shown = "<i>bytes not kept</i>"
    return f"<figure>{shown}<figcaption>{caption}</figcaption></figure>"


def _requests(
    journal: list[tuple[int, float, str, Any]],
) -> tuple[dict[str, list[_Request]], list[float]]:
    """Each run's model requests, from its TickOpened to its StreamClosed, by the path of
    the run ("" the root, "c1.2" the child its call c1.2 started: entries "event@c1.2");
    and when the run was resumed."""
    runs: dict[str, list[_Request]] = {}
    resumes: list[float] = []
    for _, at, tagged, body in journal:
        kind, where = untag_kind(tagged)
        if not isinstance(body, dict) or kind not in ("event", "note"):
            continue
        path = str(where)
        requests = runs.setdefault(path, [])
        if kind == "event":
            event_type = body.get("type")
            if event_type == "TickOpened":
                requests.append(_Request(body.get("iteration", len(requests) + 1), at))
            elif event_type == "StreamClosed" and requests and requests[-1].end is None:
                requests[-1].end = at
            elif event_type == "FaultReported" and requests:
                message = (body.get("error") or {}).get("message", "")
                if "cut off by a crash" in message:
                    requests[-1].cut_off = True
        elif body.get("note") == "resumed":
            if not path:
                resumes.append(at)
        elif body.get("note") == "retry" and requests:
            requests[-1].retries += 1
    return runs, resumes


def _times(call: CallInfo) -> list[float]:
    return [
        t
        for t in (
            call.received,
            call.ready,
            call.asked,
            call.decided,
            call.started,
            call.finished,
        )
        if t is not None
    ]


def run_origin(
    run: RunInfo, calls: list[CallInfo], journal: list[tuple[int, float, str, Any]]
) -> float:
    """The zero of a stored run's clock: its earliest recorded moment (usually the first
    request going out, before any call arrived). `tickloop trace` counts its "started"
    column from it and the timeline its axis, so the two agree."""
    moments = [t for call in calls for t in _times(call)]
    moments += [at for _, at, _, _ in journal]
    return min(moments) if moments else run.created


def _render(
    run: RunInfo,
    calls: list[CallInfo],
    runs: dict[str, list[_Request]],
    resumes: list[float],
    journal: list[tuple[int, float, str, Any]],
) -> str:
    requests = runs.get("", [])
    moments = [t for call in calls for t in _times(call)]
    moments += [r.start for r in requests] + [r.end for r in requests if r.end is not None]
    moments += [at for _, at, _, _ in journal]
    origin = run_origin(run, calls, journal)  # requests come from the journal: included
    last = max(moments) if moments else run.created
    span = max(last - origin, 1e-3)
    scale = _PLOT / span

    def x(t: float) -> float:
        return _LABEL + (t - origin) * scale

    rows = 1 + len(calls)
    height = _TOP + rows * _ROW + 20
    width = _LABEL + _PLOT + 30
    parts: list[str] = []
    parts.append(_axis(origin, span, x, height))
    for at in resumes:
        # Near the right edge the label goes left of its line, or the page would clip it.
        flip = x(at) + 3 + _RESUMED_LABEL_WIDTH > width
        label_x = x(at) - 3 if flip else x(at) + 3
        anchor = ' text-anchor="end"' if flip else ""
        parts.append(
            f'<line class="resume" x1="{x(at):.1f}" x2="{x(at):.1f}" y1="{_TOP - 8}" '
            f'y2="{height - 16}"/><text class="resume-label" x="{label_x:.1f}"{anchor} '
            f'y="{_TOP - 10}">resumed</text>'
        )
    parts.append(_model_lane(requests, x, last))
    index = {call.id: position for position, call in enumerate(calls)}
    arrows: list[str] = []
    for position, call in enumerate(calls):
        parts.append(_call_row(call, position + 1, x, last, origin))
        if runs.get(call.id):  # a sub-agent's call: its child's requests, on its row
            parts.append(_child_requests(call.id, runs[call.id], position + 1, x, last))
        for dep in call.deps:
            if dep in index:
                arrows.append(_arrow(calls[index[dep]], index[dep] + 1, call, position + 1, x))
    parts.append(_verdict_marks(guardrail_verdicts(journal), index, x))
    statuses: dict[str, int] = {}
    for call in calls:
        statuses[call.status] = statuses.get(call.status, 0) + 1
    summary = ", ".join(f"{count} {status}" for status, count in sorted(statuses.items()))
    started = datetime.fromtimestamp(run.created, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    title = f"tickloop run {run.run_id}"
    svg = (
        f'<svg id="timeline" xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}">'
        f'{_DEFS}{"".join(parts)}<g id="arrows">{"".join(arrows)}</g></svg>'
    )
    return _PAGE.format(
        title=escape(title),
        status=escape(run.status),
        started=escape(started),
        duration=f"{span:.2f}",
        count=len(calls),
        summary=escape(summary or "no calls"),
        legend=_LEGEND,
        svg=svg,
        run=escape(run.run_id),
        style=_STYLE,
        script=_SCRIPT,
    )


def _axis(origin: float, span: float, x: Any, height: int) -> str:
    step = _nice_step(span / 8)
    parts = []
    tick = 0.0
    while tick <= span + 1e-9:
        px = x(origin + tick)
        parts.append(
            f'<line class="grid" x1="{px:.1f}" x2="{px:.1f}" y1="{_TOP - 4}" y2="{height - 16}"/>'
            f'<text class="tick" x="{px:.1f}" y="{_TOP - 16}">{_seconds(tick, step)}</text>'
        )
        tick += step
    return "".join(parts)


def _nice_step(raw: float) -> float:
    exponent = math.floor(math.log10(raw)) if raw > 0 else 0
    for factor in (1, 2, 5, 10):
        step = factor * 10.0**exponent
        if step >= raw:
            return step
    return 10.0 ** (exponent + 1)


def _seconds(value: float, step: float) -> str:
    decimals = max(0, -math.floor(math.log10(step))) if step < 1 else 0
    return f"{value:.{decimals}f}s"


def _y(row: int) -> float:
    return _TOP + row * _ROW


def _model_lane(requests: list[_Request], x: Any, last: float) -> str:
    y = _y(0)
    parts = [
        f'<g class="lane model"><text class="label" x="8" y="{y + _ROW / 2 + 4:.1f}">'
        "model (streaming)</text>"
    ]
    for request in requests:
        left, right = _request_bar(request, x, last, y + (_ROW - _BAR) / 2, _BAR, parts)
        if right - left > 64:  # a label only where it fits inside the bar
            parts.append(
                f'<text class="bar-label" x="{left + 3:.1f}" y="{y + _ROW / 2 + 4:.1f}">'
                f"request {request.iteration}</text>"
            )
    parts.append("</g>")
    return "".join(parts)


def _child_requests(call_id: str, requests: list[_Request], row: int, x: Any, last: float) -> str:
    """A sub-agent's model requests, drawn thin over the bar of the call that ran it."""
    parts = [f'<g class="lane child-model" data-run="{escape(call_id)}">']
    top = _y(row) + (_ROW - _BAR) / 2 + _BAR / 3
    for request in requests:
        _request_bar(request, x, last, top, _BAR / 3, parts, f"sub-agent run {call_id}: ")
    parts.append("</g>")
    return "".join(parts)


def _request_bar(
    request: _Request,
    x: Any,
    last: float,
    top: float,
    height: float,
    parts: list[str],
    where: str = "",
) -> tuple[float, float]:
    """Draw one model request as a bar into `parts`; its left and right edges."""
    end = request.end if request.end is not None else last
    left, right = x(request.start), max(x(end), x(request.start) + 2)
    note = " — cut off by a crash" if request.cut_off else ""
    note += f" — {request.retries} retries" if request.retries else ""
    note += f" — on worker {request.worker}" if request.worker else ""
    parts.append(
        f'<rect class="seg stream{" cut" if request.cut_off else ""}" x="{left:.1f}" '
        f'y="{top:.1f}" width="{right - left:.1f}" height="{height:g}">'
        f"<title>{escape(where)}request {request.iteration}: {end - request.start:.3f}s"
        f"{escape(note)}</title></rect>"
    )
    return left, right


def _segments(call: CallInfo, last: float) -> list[tuple[str, float, float]]:
    """(kind, start, end) pieces of a call's bar, in time order."""
    end = call.finished if call.finished is not None else last
    pieces: list[tuple[str, float, float]] = []
    if call.received is not None:
        ready = call.ready if call.ready is not None else end
        pieces.append((CallStatus.WAITING, call.received, ready))
    if call.asked is not None:
        pieces.append(("approval", call.asked, call.decided if call.decided is not None else end))
    queued_from = call.decided if call.decided is not None else call.ready
    if queued_from is not None and call.started is not None and call.started > queued_from:
        pieces.append((CallStatus.QUEUED, queued_from, call.started))
    if call.started is not None:
        pieces.append((CallStatus.RUNNING, call.started, end))
    return [(kind, start, stop) for kind, start, stop in pieces if stop >= start]


def _call_row(call: CallInfo, row: int, x: Any, last: float, origin: float) -> str:
    y = _y(row)
    top = y + (_ROW - _BAR) / 2
    label = f"{call.id}  {call.tool or '?'}" + (f" @ {call.worker}" if call.worker else "")
    tip = _tooltip(call, origin)
    parts = [
        f'<g class="call {escape(call.status)}" data-id="{escape(call.id)}" '
        f'data-deps="{escape(" ".join(call.deps))}" data-worker="{escape(call.worker or "")}">',
        f'<rect class="hover" x="0" y="{y:.1f}" width="{_LABEL + _PLOT + 30}" height="{_ROW}"/>',
        f'<text class="label" x="8" y="{y + _ROW / 2 + 4:.1f}">{escape(label[:34])}</text>',
    ]
    colour = _STATUS_COLOURS.get(call.status, "#2f6fd6")
    for kind, start, stop in _segments(call, last):
        left = x(start)
        width = max(x(stop) - left, 1.5)
        fill = f' style="fill:{colour}"' if kind == CallStatus.RUNNING else ""
        parts.append(
            f'<rect class="seg {kind}" x="{left:.1f}" y="{top:.1f}" width="{width:.1f}" '
            f'height="{_BAR}"{fill}><title>{escape(tip)}</title></rect>'
        )
    if call.status in ERROR_STATUSES or call.status == CallStatus.SKIPPED:
        at = call.finished if call.finished is not None else last
        cx = x(at)
        mark = "✕" if call.status in ERROR_STATUSES else "–"
        parts.append(
            f'<g class="mark {escape(call.status)}"><circle cx="{cx:.1f}" cy="{y + _ROW / 2:.1f}"'
            f' r="7"/><text x="{cx:.1f}" y="{y + _ROW / 2 + 4:.1f}">{mark}</text>'
            f"<title>{escape(tip)}</title></g>"
        )
    parts.append("</g>")
    return "".join(parts)


def _tooltip(call: CallInfo, origin: float) -> str:
    lines = [f"{call.id} {call.tool or '?'}: {call.status}"]
    if call.started is not None:  # the same figure as `tickloop trace`'s "started"
        lines.append(f"started: {call.started - origin:.3f}s after the run began")

    def span(name: str, start: float | None, stop: float | None) -> None:
        if start is not None and stop is not None:
            lines.append(f"{name}: {stop - start:.3f}s")

    span("waited for inputs", call.received, call.ready)
    span("waited for approval", call.asked, call.decided)
    span("ran", call.started, call.finished)
    if call.worker:
        lines.append(f"worker: {call.worker}")
    if call.decision:
        lines.append(f"decision: {call.decision.get('decision')}")
    if call.deps:
        lines.append(f"waited on: {', '.join(call.deps)}")
    if call.params is not None:
        lines.append(f"params: {_short(call.params)}")
    if call.error:
        lines.append(f"error ({call.error.get('type')}): {call.error.get('message')}")
    return "\n".join(lines)


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 160 else text[:157] + "..."


def _arrow(source: CallInfo, source_row: int, target: CallInfo, target_row: int, x: Any) -> str:
    start_t = source.finished or source.started or source.received or 0.0
    end_t = target.ready or target.finished or target.received or start_t
    x1, y1 = x(start_t), _y(source_row) + _ROW / 2
    x2, y2 = x(end_t), _y(target_row) + _ROW / 2
    bend = max(abs(x2 - x1) / 2, 24)
    return (
        f'<path class="dep" data-from="{escape(source.id)}" data-to="{escape(target.id)}" '
        f'd="M{x1:.1f},{y1:.1f} C{x1 + bend:.1f},{y1:.1f} {x2 - bend:.1f},{y2:.1f} '
        f'{x2:.1f},{y2:.1f}" marker-end="url(#head)"/>'
    )


_DEFS = (
    "<defs>"
    '<marker id="head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
    'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
    'fill="#6b4fbb"/></marker>'
    '<pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
    'patternTransform="rotate(45)"><rect width="6" height="6" fill="#e4e7eb"/>'
    '<line x1="0" y1="0" x2="0" y2="6" stroke="#c3c9d1" stroke-width="3"/></pattern>'
    "</defs>"
)

_LEGEND = (
    '<span class="key"><i class="waiting"></i>waiting for inputs</span>'
    '<span class="key"><i class="approval"></i>waiting for approval</span>'
    '<span class="key"><i class="queued"></i>queued (concurrency limit)</span>'
    '<span class="key"><i class="running"></i>running</span>'
    '<span class="key"><i class="failed"></i>failed / invalid</span>'
    '<span class="key"><i class="denied"></i>denied</span>'
    '<span class="key"><i class="stream"></i>model streaming</span>'
    '<span class="key hint">hover a call: arrows to what it waited on</span>'
)

_STYLE = """
body { font: 13px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 16px;
       color: #1f2328; background: #fff; }
h1 { font-size: 17px; margin: 0 0 4px; }
h2 { font-size: 15px; margin: 16px 0 4px; }
.media figure { display: inline-block; margin: 0 12px 12px 0; }
.media img { max-width: 320px; max-height: 240px; min-width: 32px; border: 1px solid #d0d7de; }
.media figcaption { color: #57606a; font-size: 11px; }
.meta { color: #57606a; margin-bottom: 8px; }
.legend { margin: 6px 0 10px; }
.key { margin-right: 14px; white-space: nowrap; }
.key i { display: inline-block; width: 14px; height: 10px; margin-right: 4px;
         vertical-align: middle; border-radius: 2px; }
.key i.waiting { background: repeating-linear-gradient(45deg, #e4e7eb 0 3px, #c3c9d1 3px 6px); }
.key i.approval { background: #f2c14e; }
.key i.queued { background: #b9c7dc; }
.key i.running { background: #2f6fd6; }
.key i.failed { background: #d33a2c; }
.key i.denied { background: #e07b12; }
.key i.stream { background: #8a63d2; }
.key.hint { color: #57606a; }
svg text { font: 12px system-ui, sans-serif; fill: #1f2328; }
.tick { text-anchor: middle; fill: #57606a; font-size: 11px; }
.grid { stroke: #eef0f3; }
.label { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 11.5px; }
.bar-label { fill: #fff; font-size: 10.5px; pointer-events: none; }
.hover { fill: transparent; }
.call:hover .hover, .call.focus .hover { fill: #f3f0fb; }
.call.related .hover { fill: #f8f6fd; }
.seg { rx: 2px; }
.seg.waiting { fill: url(#hatch); }
.seg.approval { fill: #f2c14e; }
.seg.queued { fill: #b9c7dc; }
.seg.stream { fill: #8a63d2; }
.seg.stream.cut { fill: #c9b6ee; stroke: #d33a2c; stroke-dasharray: 3 2; }
.call.skipped .seg.waiting { stroke: #9aa3ad; stroke-dasharray: 3 2; }
.mark circle { fill: #d33a2c; }
.mark.denied circle { fill: #e07b12; }
.mark.skipped circle { fill: #9aa3ad; }
.mark text { fill: #fff; text-anchor: middle; font-weight: bold; font-size: 11px; }
.dep { fill: none; stroke: #6b4fbb; stroke-width: 1.6; opacity: 0; pointer-events: none; }
.dep.on { opacity: .9; }
.verdict path { fill: #1a7f37; stroke: #fff; stroke-width: 1; }
.verdict.deny path, .verdict.reject path, .verdict.replace path { fill: #e07b12; }
.verdict.trip path { fill: #d33a2c; }
table.verdicts { border-collapse: collapse; }
table.verdicts td, table.verdicts th { padding: 2px 10px 2px 0; text-align: left; }
.resume { stroke: #d33a2c; stroke-dasharray: 4 3; }
.resume-label { fill: #d33a2c; font-size: 11px; }
"""

_SCRIPT = """
(function () {
  var svg = document.getElementById('timeline');
  var arrows = svg.querySelectorAll('.dep');
  var calls = svg.querySelectorAll('.call');
  function show(id, on) {
    arrows.forEach(function (a) {
      var hit = a.getAttribute('data-from') === id || a.getAttribute('data-to') === id;
      a.classList.toggle('on', on && hit);
      if (hit) {
        var other = a.getAttribute('data-from') === id ? a.getAttribute('data-to')
                                                        : a.getAttribute('data-from');
        var row = svg.querySelector('.call[data-id="' + CSS.escape(other) + '"]');
        if (row) row.classList.toggle('related', on);
      }
    });
  }
  calls.forEach(function (row) {
    var id = row.getAttribute('data-id');
    row.addEventListener('mouseenter', function () { show(id, true); });
    row.addEventListener('mouseleave', function () { show(id, false); });
  });
  var focus = new URLSearchParams(location.search).get('focus');
  if (focus) {
    var row = svg.querySelector('.call[data-id="' + CSS.escape(focus) + '"]');
    if (row) { row.classList.add('focus'); show(focus, true); }
  }
  document.body.setAttribute('data-ready', String(calls.length));
})();
"""

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>{title}</title>
<style>{style}</style></head>
<body data-run="{run}">
<h1>{title}</h1>
<div class="meta">status <b>{status}</b> · started {started} · {duration}s on the run clock ·
{count} calls ({summary})</div>
<div class="legend">{legend}</div>
{svg}
<!--media-->
<script>{script}</script>
</body></html>
"""
