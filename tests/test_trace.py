"""The HTML timeline of a stored run (also in a real headless browser) and OTel spans."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import tickloop as tl
from tickloop._cli._main import main


@tl.tool
async def search(query: str) -> list[str]:
    await trio.sleep(0.6 if "flights" in query else 0.9)
    return [f"{query}: 3 results"]


@tl.tool
async def fetch_page(url: str) -> str:
    await trio.sleep(0.5)
    raise ConnectionError("503 from upstream")


@tl.tool(max_concurrency=1)
async def summarize(texts: list[str]) -> str:
    await trio.sleep(0.4)
    return "summary"


@tl.tool(requires_approval=True)
async def book(option: str) -> str:
    await trio.sleep(0.5)
    return "booked"


@tl.tool
async def notify(text: str) -> str:
    await trio.sleep(0.2)
    return "sent"


PLAN = [
    {"_tool": "search", "query": "flights to Porto", "_outputPath": "†state.flights"},
    {"_tool": "search", "query": "hotels in Porto", "_outputPath": "†state.hotels"},
    {"_tool": "fetch_page", "url": "reviews/porto", "_outputPath": "†state.reviews"},
    {"_tool": "summarize", "texts": "†state.flights", "_outputPath": "†state.s1"},
    {"_tool": "summarize", "texts": "†state.hotels", "_outputPath": "†state.s2"},
    {"_tool": "summarize", "texts": "†state.reviews", "_outputPath": "†state.s3"},
    {"_tool": "book", "option": "†state.s1 && †state.s2", "_outputPath": "†state.booking"},
    {"_tool": "notify", "text": "†state.booking", "_outputPath": "†state.mail"},
]


async def _a_person_approves(call: tl.PendingCall) -> tl.Decision:
    await trio.sleep(0.8)
    return tl.Approve()


def run_example(db: Path, **options: Any) -> tl.RunResult:
    """A trip planner: fan-out, a failure, a concurrency limit, an approval that takes time.

    It is also what made docs/timeline.png.
    """
    model = tl.ScriptedModel(
        [{"calls": PLAN, "output": None}, {"calls": [], "output": "done"}],
        chunk_chars=24,
        chunk_delay=0.03,
    )
    agent = tl.Agent(
        model,
        tools=[search, fetch_page, summarize, book, notify],
        approve=_a_person_approves,
        store=db,
        **options,
    )
    return trio.run(
        lambda: agent.run_async({"trip": "Porto"}, run_id="trip-porto"),
        clock=trio.testing.MockClock(autojump_threshold=0),
    )


@pytest.fixture
def example(tmp_path: Path) -> Path:
    db = tmp_path / "runs.db"
    result = run_example(db)
    assert result.records["c1.2"].status == "failed"
    assert result.records["c1.5"].status == "invalid"
    return db


def test_the_timeline_shows_each_call_its_phases_its_errors_and_its_dependencies(
    example: Path,
) -> None:
    page = tl.timeline_html(example, "trip-porto")
    rows = re.findall(r'<g class="call (\w+)" data-id="([^"]+)" data-deps="([^"]*)"', page)
    assert rows == [
        ("done", "c1.0", ""),
        ("done", "c1.1", ""),
        ("failed", "c1.2", ""),
        ("done", "c1.3", "c1.0"),
        ("done", "c1.4", "c1.1"),
        ("invalid", "c1.5", "c1.2"),  # it waited on the failed c1.2 (issue 16 item 12)
        ("done", "c1.6", "c1.3 c1.4"),
        ("done", "c1.7", "c1.6"),
    ]
    assert page.count('class="seg stream') == 2  # the model's lane: one bar per request
    assert page.count('class="seg approval"') == 1  # only book waited for a person
    assert page.count('class="seg running"') == 7  # c1.5 never ran
    assert (
        page.count('<g class="mark failed">') == 1 and page.count('<g class="mark invalid">') == 1
    )
    assert "error (runtime): ConnectionError: 503 from upstream" in page
    assert "waited for approval: 0.800s" in page  # virtual time, exactly
    assert (
        len(re.findall(r'<path class="dep" data-from="c1\.\d" data-to="c1\.\d"', page)) == 6
    )  # c1.2 -> c1.5 included
    # Self-contained: nothing to fetch.
    assert not re.search(r"<link|<img|src=|@import|url\(http", page)


def test_the_trace_command_writes_the_page_or_prints_a_table(
    example: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.html"
    assert main(["trace", "trip-porto", "--html", str(out), "--store", str(example)]) == 0
    assert out.read_text(encoding="utf-8") == tl.timeline_html(example, "trip-porto")
    assert capsys.readouterr().out == f"wrote {out}\n"
    assert main(["trace", "trip-porto", "--store", str(example)]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert header.split() == ["call", "tool", "status", "started", "ran", "why"]
    assert [line.split()[:3] for line in lines][:3] == [
        ["c1.0", "search", "done"],
        ["c1.1", "search", "done"],
        ["c1.2", "fetch_page", "failed"],
    ]
    failed = next(line for line in lines if line.startswith("c1.2 "))
    assert len(failed.split()) > 5  # the error's reason is shown (issue 16 item 10)
    assert main(["trace", "nope", "--store", str(example)]) == 2


CHROMIUM = shutil.which("chromium") or (
    "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None
)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (apt-get install chromium)")
def test_the_timeline_renders_in_headless_chromium(example: Path, tmp_path: Path) -> None:
    assert CHROMIUM is not None
    page = tmp_path / "timeline.html"
    page.write_text(tl.timeline_html(example, "trip-porto"), encoding="utf-8")
    url = page.as_uri() + "?focus=c1.6"
    dom = subprocess.run(
        [CHROMIUM, *FLAGS, "--dump-dom", url], capture_output=True, text=True, timeout=120
    ).stdout
    assert 'data-ready="8"' in dom  # the script ran over every call
    # Focusing (as hovering does) c1.6 shows its two inputs and its one dependent.
    shown = re.findall(r'class="dep on" data-from="([^"]+)" data-to="([^"]+)"', dom)
    assert sorted(shown) == [("c1.3", "c1.6"), ("c1.4", "c1.6"), ("c1.6", "c1.7")]

    shot = tmp_path / "timeline.png"
    subprocess.run(
        [
            CHROMIUM,
            *FLAGS,
            "--hide-scrollbars",
            f"--screenshot={shot}",
            "--window-size=1160,440",
            url,
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert (int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")) == (1160, 440)
    image_module = pytest.importorskip("PIL.Image")
    with image_module.open(shot) as image:
        colours = {colour for _, colour in image.convert("RGB").getcolors(1 << 20) or []}
    # The phases are drawn in their own colours: streaming, approval, running, error.
    for hex_colour in ("8a63d2", "f2c14e", "2f6fd6", "d33a2c"):
        assert tuple(bytes.fromhex(hex_colour)) in colours, hex_colour


# -- OpenTelemetry ---------------------------------------------------------------------


def test_spans_nest_turn_request_execute_tool_with_ids_and_statuses(tmp_path: Path) -> None:
    trace = pytest.importorskip("opentelemetry.trace")
    provider = _fake_provider(trace)
    run_example(tmp_path / "runs.db", tracer_provider=provider)
    spans = provider.spans
    assert all(span.ended for span in spans)
    turns = [span for span in spans if span.name == "turn"]
    requests = [span for span in spans if span.name == "request"]
    tools = [span for span in spans if span.name == "execute_tool"]
    assert len(turns) == len(requests) == 2 and len(tools) == 8
    assert all(request.parent is turn for request, turn in zip(requests, turns, strict=True))
    assert all(span.parent is requests[0] for span in tools)
    by_id = {span.attributes["gen_ai.tool.call.id"]: span for span in tools}
    assert by_id["c1.6"].attributes["gen_ai.tool.name"] == "book"
    assert by_id["c1.6"].attributes["tickloop.call.status"] == "done"
    assert by_id["c1.2"].attributes["tickloop.call.status"] == "failed"
    assert by_id["c1.2"].status.description == "ConnectionError: 503 from upstream"
    assert by_id["c1.5"].attributes["tickloop.call.status"] == "invalid"
    assert {span.attributes["tickloop.run_id"] for span in spans} == {"trip-porto"}


def _fake_provider(trace: Any) -> Any:
    """A TracerProvider that keeps its spans in a list (opentelemetry-api only)."""

    class Span(trace.Span):  # type: ignore[misc, name-defined]
        def __init__(self, name: str, parent: Any, attributes: dict[str, Any]) -> None:
            self.name, self.parent, self.attributes = name, parent, dict(attributes)
            self.ended, self.status, self.events = False, None, []

        def end(self, end_time: int | None = None) -> None:
            assert not self.ended, f"{self.name} ended twice"
            self.ended = True

        def get_span_context(self) -> Any:
            return trace.INVALID_SPAN_CONTEXT

        def set_attributes(self, attributes: dict[str, Any]) -> None:
            self.attributes.update(attributes)

        def set_attribute(self, key: str, value: Any) -> None:
            self.attributes[key] = value

        def add_event(self, name: str, attributes: Any = None, timestamp: Any = None) -> None:
            self.events.append(name)

        def update_name(self, name: str) -> None:
            self.name = name

        def is_recording(self) -> bool:
            return not self.ended

        def set_status(self, status: Any, description: str | None = None) -> None:
            self.status = status

        def record_exception(self, *args: Any, **kwargs: Any) -> None:
            pass

    class Tracer(trace.Tracer):  # type: ignore[misc, name-defined]
        def __init__(self, spans: list[Span]) -> None:
            self.spans = spans

        def start_span(
            self, name: str, context: Any = None, kind: Any = None, attributes: Any = None, **_: Any
        ) -> Span:
            parent = trace.get_current_span(context) if context is not None else None
            span = Span(name, parent if isinstance(parent, Span) else None, attributes or {})
            self.spans.append(span)
            return span

        def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    class Provider(trace.TracerProvider):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            self.spans: list[Span] = []

        def get_tracer(self, *args: Any, **kwargs: Any) -> Tracer:
            return Tracer(self.spans)

    return Provider()
