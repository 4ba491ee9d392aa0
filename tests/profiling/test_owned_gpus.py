"""Which of the GPUs a sampler sees are the task's: ``NVIDIA_VISIBLE_DEVICES`` as the NVIDIA
container toolkit reads it (``all``, ``none``, ``void``, UUIDs, indices; ``void`` is also what the
device plugin sets when it hands devices over by CDI) and ``CUDA_VISIBLE_DEVICES`` as CUDA reads it
(the CUDA programming guide's environment variables: indices or UUIDs, unique UUID prefixes, "if
one of the indices is invalid, only the devices whose index precedes the invalid index are
visible"; PyTorch's ``_parse_visible_devices``, which mirrors CUDA, for repeats and ``1gpu``)."""

from __future__ import annotations

import pytest

from airflow_gpu.profiling.samples import Owned, owned_gpus

UUIDS = [f"GPU-{n}a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5{n}" for n in range(4)]  # four GPUs, NVML's order
MIG_OF_2 = "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f"


def parent(uuid: str) -> str | None:
    return UUIDS[2] if uuid == MIG_OF_2 else None


def owned(**env: str) -> Owned:
    return owned_gpus(env, UUIDS, parent)


@pytest.mark.parametrize(
    ("value", "indices"),
    [
        ("2,3", (2, 3)),
        ("3,2", (2, 3)),  # CUDA's order is not NVML's: the samples stay under NVML's index
        ("0,2,-1,1", (0, 2)),  # the CUDA guide's example: reading stops at the invalid entry
        ("1,7,0", (1,)),  # an index past the last GPU is invalid too
        ("1gpu2,3", (1, 3)),  # read as strtoul reads it
        ("1,1", ()),  # a repeated index: no GPU at all
        ("", ()),  # set and empty: no GPU
        (f"{UUIDS[3][:12]},{UUIDS[1]}", (1, 3)),  # a unique prefix of a UUID names its GPU
        (f"{UUIDS[1]},2", (1,)),  # the first entry says UUIDs: an index after it ends the list
        ("GPU-,GPU-0", ()),  # a prefix of every UUID names no one GPU: the list ends there
        (MIG_OF_2, (2,)),
    ],
)
def test_cuda_visible_devices_as_cuda_reads_it(value: str, indices: tuple[int, ...]) -> None:
    chosen = owned(CUDA_VISIBLE_DEVICES=value)
    assert chosen.indices == indices
    assert chosen.everything is False
    assert chosen.slices == (frozenset({2}) if value.startswith("MIG-") else frozenset())


@pytest.mark.parametrize("value", ["all", "void", "", "/var/run/nvidia-container-devices"])
def test_nvidia_visible_devices_that_leave_the_choice_to_the_runtime(value: str) -> None:
    """``void`` and empty: the toolkit does nothing (CDI hands the devices over, the container sees
    only its own); a path: the device plugin's volume-mounts strategy."""
    assert owned(NVIDIA_VISIBLE_DEVICES=value) == Owned((0, 1, 2, 3))
    assert owned() == Owned((0, 1, 2, 3))


def test_nvidia_visible_devices_none_uuids_and_indices() -> None:
    nothing = owned(NVIDIA_VISIBLE_DEVICES="none")
    assert nothing.indices == () and nothing.note is not None and "NVIDIA_VISIBLE_DEVICES='none'" in nothing.note

    by_uuid = owned(NVIDIA_VISIBLE_DEVICES=f"{UUIDS[3]},{UUIDS[0]}")
    assert (by_uuid.indices, by_uuid.everything, by_uuid.note) == ((0, 3), False, None)

    # Indices name NVML's GPUs only where NVML sees more than the list names (no runtime filtered them)...
    assert owned(NVIDIA_VISIBLE_DEVICES="2,3").indices == (2, 3)
    assert owned(NVIDIA_VISIBLE_DEVICES="1:0").slices == frozenset({1})  # MIG device 0 of GPU 1
    # ...inside a container the runtime has hidden the others and numbered the rest from 0.
    inside = owned_gpus({"NVIDIA_VISIBLE_DEVICES": "5,7"}, UUIDS[:2], parent)
    assert inside == Owned((0, 1))

    mig = owned(NVIDIA_VISIBLE_DEVICES=MIG_OF_2)
    assert (mig.indices, mig.slices) == ((2,), frozenset({2}))

    stale = owned(NVIDIA_VISIBLE_DEVICES=f"{UUIDS[1]},GPU-ffffffff-0000-0000-0000-000000000000")
    assert stale.indices == (1,)
    assert stale.note == (
        "NVIDIA_VISIBLE_DEVICES names GPU-ffffffff-0000-0000-0000-000000000000, which this container does not see"
    )


def test_both_variables_narrow_the_choice() -> None:
    both = owned(NVIDIA_VISIBLE_DEVICES=f"{UUIDS[1]},{UUIDS[2]},{UUIDS[3]}", CUDA_VISIBLE_DEVICES="0,1,2")
    assert both.indices == (1, 2)
    assert owned_gpus({"CUDA_VISIBLE_DEVICES": "0"}, []) == Owned((), everything=True)  # no GPU seen: no note
