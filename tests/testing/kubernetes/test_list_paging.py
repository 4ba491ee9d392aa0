"""Paged LISTs (``limit`` and ``continue``) through the ``kubernetes`` client, in the shape the API
reference gives ``ListMeta`` and the ``continue`` parameter: pages of one snapshot, ``continue`` while
keys follow, ``remainingItemCount`` only without a selector, ``410 Expired`` once the snapshot is
compacted (with a token that goes on at the latest state), ``400`` for ``continue`` with a
``resourceVersion``."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator

#: The root CA publisher's ConfigMap, in every namespace of a real cluster (1.21+): listed after ``cm-*``.
ROOT_CA = "kube-root-ca.crt"


def config_map(core: client.CoreV1Api, name: str, parity: int) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": name, "labels": {"parity": str(parity)}}})


def names(listed: client.V1ConfigMapList) -> list[str]:
    return [item.metadata.name for item in listed.items]


def test_pages_are_one_snapshot_with_a_continue_token_while_keys_follow(core: client.CoreV1Api) -> None:
    for i in range(7):
        config_map(core, f"cm-{i}", i % 2)
    first = core.list_namespaced_config_map("default", limit=3)
    assert names(first) == ["cm-0", "cm-1", "cm-2"]
    assert first.metadata._continue and first.metadata.remaining_item_count == 5
    # Changes after the first page are not in the next ones: they read the first page's resourceVersion.
    config_map(core, "cm-3a", 0)
    core.delete_namespaced_config_map("cm-4", "default")
    core.patch_namespaced_config_map("cm-5", "default", {"metadata": {"labels": {"parity": "changed"}}})
    second = core.list_namespaced_config_map("default", limit=3, _continue=first.metadata._continue)
    assert names(second) == ["cm-3", "cm-4", "cm-5"] and second.items[2].metadata.labels["parity"] == "1"
    assert second.metadata.remaining_item_count == 2
    last = core.list_namespaced_config_map("default", limit=3, _continue=second.metadata._continue)
    assert names(last) == ["cm-6", ROOT_CA]
    assert last.metadata._continue is None and last.metadata.remaining_item_count is None  # the last page
    assert first.metadata.resource_version == second.metadata.resource_version == last.metadata.resource_version
    # A new list sees the changes.
    assert "cm-3a" in names(core.list_namespaced_config_map("default", limit=100))


def test_with_a_selector_the_remaining_count_is_unknown(core: client.CoreV1Api) -> None:
    for i in range(6):
        config_map(core, f"cm-{i}", i % 2)
    first = core.list_namespaced_config_map("default", limit=2, label_selector="parity=1")
    assert names(first) == ["cm-1", "cm-3"]
    assert first.metadata._continue and first.metadata.remaining_item_count is None
    rest = core.list_namespaced_config_map("default", label_selector="parity=1", _continue=first.metadata._continue)
    assert names(rest) == ["cm-5"] and rest.metadata._continue is None


def test_a_compacted_snapshot_expires_its_token_with_410_and_one_that_goes_on(
    core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator
) -> None:
    for i in range(5):
        config_map(core, f"cm-{i}", 0)
    first = core.list_namespaced_config_map("default", limit=2)
    core.delete_namespaced_config_map("cm-3", "default")
    kubernetes_emulator.compact_history()
    with pytest.raises(client.ApiException) as expired:
        core.list_namespaced_config_map("default", limit=2, _continue=first.metadata._continue)
    status = json.loads(expired.value.body)
    assert (expired.value.status, status["reason"]) == (410, "Expired")
    # The Status's token goes on from the next key at the latest state: cm-3 is gone there.
    rest = core.list_namespaced_config_map("default", _continue=status["metadata"]["continue"])
    assert names(rest) == ["cm-2", "cm-4", ROOT_CA]
    # Starting again without continue is the consistent way.
    assert names(core.list_namespaced_config_map("default", limit=10)) == ["cm-0", "cm-1", "cm-2", "cm-4", ROOT_CA]


def test_continue_with_a_resource_version_or_a_made_up_token_is_a_bad_request(core: client.CoreV1Api) -> None:
    for i in range(3):
        config_map(core, f"cm-{i}", 0)
    first = core.list_namespaced_config_map("default", limit=1)
    with pytest.raises(client.ApiException) as both:
        core.list_namespaced_config_map(
            "default", limit=1, _continue=first.metadata._continue, resource_version=first.metadata.resource_version
        )
    assert both.value.status == 400
    with pytest.raises(client.ApiException) as made_up:
        core.list_namespaced_config_map("default", limit=1, _continue="not-a-token")
    assert made_up.value.status == 400


def test_short_pages_hold_the_matches_among_limit_keys_and_go_on_by_continue_alone(
    core: client.CoreV1Api, kubernetes_emulator: KubernetesEmulator
) -> None:
    """The API's ``limit``: a page "may return fewer than the requested amount of items (up to zero
    items) in the event all requested objects are filtered out"; only ``continue`` says more follow."""
    kubernetes_emulator.set_short_pages()
    for i in range(6):
        config_map(core, f"cm-{i}", 1 if i in (0, 5) else 0)
    pages, token = [], None
    while True:
        listed = core.list_namespaced_config_map("default", limit=2, label_selector="parity=1", _continue=token)
        pages.append(names(listed))
        assert listed.metadata.remaining_item_count is None
        token = listed.metadata._continue
        if not token:
            break
    assert pages == [["cm-0"], [], ["cm-5"], []]  # the last page's one key, ROOT_CA, is filtered out
    # Without a selector nothing is filtered out: full pages.
    assert names(core.list_namespaced_config_map("default", limit=4)) == ["cm-0", "cm-1", "cm-2", "cm-3"]
