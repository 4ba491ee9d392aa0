"""Label and field selectors: the grammar, and property tests against a brute-force reading."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_gpu.testing.kubernetes.selectors import SelectorError, field_matcher, label_matcher

LABELS = {"app": "train", "gpu": "h100", "team": "ml"}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("", True),
        ("app=train", True),
        ("app==train", True),
        ("app!=train", False),
        ("app in (serve, train)", True),
        ("app notin (serve,train)", False),
        ("gpu", True),
        ("!gpu", False),
        ("missing!=x", True),
        ("app=train,gpu=a100", False),
        ("app in (train),team", True),
        ("example.com/tier-1.x=y", False),
    ],
)
def test_label_selector(selector: str, matches: bool) -> None:
    assert label_matcher(selector)(LABELS) is matches


@pytest.mark.parametrize("bad", ["a in (", "=x", "a=b=c", "a in (x y)", "a@b"])
def test_bad_label_selectors(bad: str) -> None:
    with pytest.raises(SelectorError):
        label_matcher(bad)


def test_field_selector() -> None:
    pod = {"metadata": {"name": "p", "namespace": "default"}, "status": {"phase": "Running"}, "spec": {}}
    assert field_matcher("metadata.name=p,status.phase!=Failed")(pod)
    assert not field_matcher("spec.nodeName=n1")(pod)
    assert field_matcher("spec.nodeName=")(pod)
    with pytest.raises(SelectorError):
        field_matcher("no operator here")


_KEYS = st.sampled_from(["app", "gpu", "team", "zone"])
_VALUES = st.sampled_from(["train", "h100", "ml", "x"])


@given(st.dictionaries(_KEYS, _VALUES), _KEYS, st.lists(_VALUES, min_size=1, max_size=3))
def test_set_based_agrees_with_the_definition(labels: dict[str, str], key: str, values: list[str]) -> None:
    listed = ", ".join(values)
    assert label_matcher(f"{key} in ({listed})")(labels) is (labels.get(key) in values)
    assert label_matcher(f"{key} notin ({listed})")(labels) is (labels.get(key) not in values)
    assert label_matcher(f"{key}")(labels) is (key in labels)
    assert label_matcher(f"!{key}")(labels) is (key not in labels)


@given(st.text(max_size=30))
def test_any_selector_parses_or_raises_selector_error(text: str) -> None:
    with contextlib.suppress(SelectorError):
        assert label_matcher(text)({"a": "b"}) in (True, False)
