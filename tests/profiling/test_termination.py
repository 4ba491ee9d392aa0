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
    budget,
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


def end_of(**fields: object) -> dict[str, object]:
    return {"exit_code": 0, "signals": [], "spot_notice": None, "result": "kept", **fields}


def test_the_message_holds_the_result_when_it_fits_and_always_the_end() -> None:
    line = RESULT_MARKER + '{"loss": 0.5}'
    text = message(line, "kept", 0, [], None, MAX_MESSAGE_BYTES)
    assert text.splitlines() == [line, END_MARKER + json.dumps(end_of())] and text.endswith("\n")
    assert read(text) == (line, end_of())
    big = RESULT_MARKER + json.dumps("x" * MAX_MESSAGE_BYTES)
    assert read(message(big, "kept", 143, ["SIGTERM"], "2026-11-27T04:00:00Z", MAX_MESSAGE_BYTES)) == (
        None, end_of(exit_code=143, signals=["SIGTERM"], spot_notice="2026-11-27T04:00:00Z", result="too long"),
    )  # fmt: skip
    assert read(message(None, "unknown", 0, [], None, MAX_MESSAGE_BYTES)) == (None, end_of(result="unknown"))
    assert message(line, "kept", 0, [], None, 10) == ""  # not even the end fits


@given(st.integers(min_value=0, max_value=MAX_MESSAGE_BYTES), st.text(max_size=300), st.integers(0, 6000))
def test_the_file_never_outgrows_what_the_kubelet_keeps_whole(own: int, value: str, budget: int) -> None:
    """Whatever the workload wrote and however long the result, the file stays within the budget (the kubelet
    reads its last 4096 bytes, then keeps the start of each container's share of 12 KiB): what is written is
    read back whole, or nothing is written."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "termination-log"
        path.write_bytes(b"w" * own)
        line = RESULT_MARKER + json.dumps(value)
        why = write(str(path), line, "kept", 0, [], None, budget)
        data = path.read_bytes()
        if why is not None:
            assert data == b"w" * own
            return
        assert len(data) <= min(budget, MAX_MESSAGE_BYTES)
        kept = data[-MAX_MESSAGE_BYTES:][: min(budget, MAX_MESSAGE_BYTES)].decode()
        result, end = read(kept)
        assert end is not None and (result == line) == (end["result"] == "kept")


def test_a_workload_s_own_message_comes_first_and_stays(tmp_path: Path) -> None:
    """The kubelet made the file; the workload wrote its own message; the entrypoint appends its lines."""
    path = tmp_path / "termination-log"
    path.write_text("checkpoint saved to s3://bucket/step-900")
    assert write(str(path), RESULT_MARKER + "1", "kept", 0, [], None) is None
    text = path.read_text()
    assert text.startswith("checkpoint saved to s3://bucket/step-900\n")
    assert read(text) == (RESULT_MARKER + "1", end_of())


def test_no_file_is_made_where_the_kubelet_made_none(tmp_path: Path) -> None:
    path = tmp_path / "absent"
    assert write(str(path), RESULT_MARKER + "1", "kept", 0, [], None) == f"no termination message file at {path}"
    assert not path.exists()
    assert write(None, RESULT_MARKER + "1", "kept", 0, [], None) is None


def test_a_full_file_leaves_the_workload_s_message_alone(tmp_path: Path) -> None:
    path = tmp_path / "termination-log"
    path.write_text("x" * (MAX_MESSAGE_BYTES - 10))
    assert "leaves no room" in (write(str(path), None, "none", 0, [], None) or "")
    assert path.read_text() == "x" * (MAX_MESSAGE_BYTES - 10)


def test_the_budget_from_the_environment() -> None:
    assert budget(None) == budget("x") == MAX_MESSAGE_BYTES
    assert budget("3072") == 3072 and budget("99999") == MAX_MESSAGE_BYTES and budget("-5") == 0


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
