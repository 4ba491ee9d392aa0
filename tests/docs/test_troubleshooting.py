"""docs/troubleshooting.rst has an entry for every error message the provider raises at parse or run
time (``docs/_ext/troubleshooting_entries.py`` reads them from the source), and no entry for a message that is
gone.

An entry is a definition-list term, the message in double backquotes with each value written
``<...>``; it covers a message when the message's text, its placeholders matching any value, is the
whole term."""

from __future__ import annotations

import sys

from tests.docs.site import DOCS

sys.path.insert(0, str(DOCS / "_ext"))
from troubleshooting_entries import MADE_ELSEWHERE, messages, missing, stale


def test_the_scan_finds_the_messages_it_must() -> None:
    """A scan that found nothing would pass the test below: it must see the kinds of message there are."""
    found = list(messages())
    templates = {m.template for m in found}
    assert "unknown capacity type" in templates  # an AcceleratorSpecError's problem
    assert "unknown accelerator" in templates  # read from the variable it is assigned to
    assert any(m.exception == "Decision" for m in found)  # the spot policy's failures
    assert any(m.exception == "ImportError" for m in found) and len(found) > 100


def test_every_message_has_an_entry() -> None:
    """The docs build fails on it too (``troubleshooting_entries.check``); here, with the whole list."""
    absent = missing()
    assert not absent, "messages without an entry in docs/troubleshooting.rst:\n" + "\n".join(absent)


def test_messages_made_elsewhere_are_the_listed_ones() -> None:
    """A raise whose text is not written where it is raised (or is all values: ``"{}: {}"``) is in
    MADE_ELSEWHERE, and each entry there still has one (else the list is stale)."""
    unread = {m.where.split(":")[0] for m in messages() if m.key is None}
    assert unread <= set(MADE_ELSEWHERE), sorted(unread - set(MADE_ELSEWHERE))
    assert set(MADE_ELSEWHERE) <= unread, sorted(set(MADE_ELSEWHERE) - unread)


def test_every_entry_is_a_message_the_code_has() -> None:
    """An entry whose text the code writes nowhere documents a message that is gone (or misquotes it)."""
    gone = stale()
    assert not gone, "entries of docs/troubleshooting.rst whose message the code no longer has:\n" + "\n".join(gone)
