"""The termination message the profiler leaves in the pod's status (``profiling/termination.py``): the
result line caught from the command's output however it is cut, what fits in the kubelet's 4096 bytes,
a workload's own message kept first, and the strict reading back. Pure functions and files: no fakes."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from airflow_gpu.profiling.termination import (
    END_MARKER,
    MAX_MESSAGE_BYTES,
    RESULT_MARKER,
    ResultCatcher,
    message,
    read,
    write,
)

LINE = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), max_size=40)
RESULT = st.builds(lambda v: RESULT_MARKER + json.dumps(v), st.integers() | st.text(max_size=20))


def whole_stream_answer(text: str, limit: int) -> str | None:
    """What a reader of the whole output at once takes: the last result line, unless it is over ``limit`` bytes."""
    found = None
    for line in text.split("\n"):
        if line.rstrip("\r").startswith(RESULT_MARKER):
            found = None if len(line.encode()) > limit else line.rstrip("\r")
    return found


@given(st.lists(LINE | RESULT, max_size=12), st.lists(st.integers(min_value=1, max_value=64), max_size=30),
       st.booleans())  # fmt: skip
def test_the_line_caught_does_not_depend_on_how_the_output_is_cut(
    lines: list[str], cuts: list[int], newline_at_end: bool
) -> None:
    text = "\n".join(lines) + ("\n" if newline_at_end and lines else "")
    data, catcher, at = text.encode(), ResultCatcher(limit=60), 0
    for size in cuts:
        catcher.feed(data[at : at + size])
        at += size
    catcher.feed(data[at:])
    catcher.close()
    assert catcher.line == whole_stream_answer(text, 60)


def test_a_result_line_too_long_to_carry_is_no_line_even_after_an_earlier_one() -> None:
    catcher = ResultCatcher(limit=100)
    catcher.feed(f"{RESULT_MARKER}1\n".encode())
    catcher.feed((RESULT_MARKER + '"' + "x" * 300 + '"').encode())
    catcher.feed(b"\nbye\n")
    catcher.close()
    assert catcher.line is None  # the last result is the long one: carrying the earlier would be a wrong result


def test_the_message_holds_the_result_when_it_fits_and_always_the_end() -> None:
    line = RESULT_MARKER + '{"loss": 0.5}'
    text = message(line, 0, [], None, MAX_MESSAGE_BYTES)
    assert text.splitlines() == [line, END_MARKER + '{"exit_code": 0, "signals": [], "spot_notice": null}']
    assert read(text) == (line, {"exit_code": 0, "signals": [], "spot_notice": None})
    big = RESULT_MARKER + json.dumps("x" * MAX_MESSAGE_BYTES)
    assert read(message(big, 143, ["SIGTERM"], "2026-11-27T04:00:00Z", MAX_MESSAGE_BYTES)) == (
        None, {"exit_code": 143, "signals": ["SIGTERM"], "spot_notice": "2026-11-27T04:00:00Z"},
    )  # fmt: skip
    assert message(line, 0, [], None, 10) == ""  # not even the end fits


def test_a_workload_s_own_message_comes_first_and_stays(tmp_path: Path) -> None:
    """The kubelet made the file; the workload wrote its own message; the entrypoint appends its lines."""
    path = tmp_path / "termination-log"
    path.write_text("checkpoint saved to s3://bucket/step-900")
    assert write(str(path), RESULT_MARKER + "1", 0, [], None) is None
    text = path.read_text()
    assert text.startswith("checkpoint saved to s3://bucket/step-900\n")
    assert read(text) == (RESULT_MARKER + "1", {"exit_code": 0, "signals": [], "spot_notice": None})
    assert len(text.encode()) <= MAX_MESSAGE_BYTES


def test_no_file_is_made_where_the_kubelet_made_none(tmp_path: Path) -> None:
    path = tmp_path / "absent"
    assert write(str(path), RESULT_MARKER + "1", 0, [], None) == f"no termination message file at {path}"
    assert not path.exists()
    assert write(None, RESULT_MARKER + "1", 0, [], None) is None


def test_a_full_file_leaves_the_workload_s_message_alone(tmp_path: Path) -> None:
    path = tmp_path / "termination-log"
    path.write_text("x" * (MAX_MESSAGE_BYTES - 10))
    assert "leaves no room" in (write(str(path), None, 0, [], None) or "")
    assert path.read_text() == "x" * (MAX_MESSAGE_BYTES - 10)


def test_only_the_entrypoint_s_own_end_counts() -> None:
    """A message without the end line last (the entrypoint never wrote: killed, or unprofiled) tells nothing,
    whatever result line a workload wrote there itself."""
    assert read(None) == (None, None)
    assert read(f"{RESULT_MARKER}1") == (None, None)
    assert read(f"{RESULT_MARKER}1\n{END_MARKER}not json") == (None, None)
    assert read(f"{RESULT_MARKER}1\n{END_MARKER}[0]") == (None, None)
    assert read(f"{RESULT_MARKER}1\nother\n{END_MARKER}{{}}") == (None, {})


def test_a_line_without_end_is_not_kept_whole() -> None:
    """A workload that prints megabytes without a newline: the catcher keeps a few bytes of it, not all."""
    catcher = ResultCatcher(limit=100)
    for _ in range(1000):
        catcher.feed(b"y" * 1000)
    assert len(catcher._pending) <= 100 and catcher.line is None
    catcher.feed(f"\n{RESULT_MARKER}2\n".encode())
    assert catcher.line == RESULT_MARKER + "2"


def test_the_entrypoint_names_the_variable_the_operator_sets() -> None:
    """The entrypoint holds the name itself (``termination`` is not shipped to AWS Batch, where nothing reads it)."""
    from airflow_gpu.profiling import bundle, entrypoint, termination

    assert entrypoint.ENV_TERMINATION_LOG == termination.ENV_TERMINATION_LOG
    assert len(bundle.payload(batch=True)) < len(bundle.payload())
