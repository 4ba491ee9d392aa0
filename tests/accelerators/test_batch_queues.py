"""Which queue launches which candidate: real ``QueueOffer`` values built from the catalog, as
``GPUBatchHook.queue_offers`` returns them."""

from __future__ import annotations

from airflow_gpu.accelerators.batch import instance_offers
from airflow_gpu.accelerators.batch_queues import QueueOffer, check_offers, offered_placement, unreadable_types
from airflow_gpu.accelerators.spec import Accelerator
from airflow_gpu.spot.policy import Placement

QUEUES = {"spot": "gpu-spot", "on-demand": "gpu-on-demand"}
H100, L4 = Accelerator.parse("H100:8"), Accelerator.parse("L4")


def test_each_candidate_goes_to_a_queue_that_launches_it() -> None:
    offers = {
        "gpu-spot": QueueOffer("gpu-spot", "spot", instance_offers(["g5", "g6"])),
        "gpu-on-demand": QueueOffer("gpu-on-demand", "on-demand", instance_offers(["p5"])),
    }
    place = lambda p: offered_placement(p, [H100, L4], QUEUES, "gpu-spot", offers)  # noqa: E731
    assert place(Placement(0, "spot")) == Placement(0, "on-demand")  # H100 only on demand
    offers["gpu-on-demand"] = QueueOffer("gpu-on-demand", "on-demand", instance_offers(["g6"]))
    assert place(Placement(0, "spot")) == Placement(1, "spot")  # no H100 anywhere: L4 on spot
    assert place(Placement(1, "on-demand")) == Placement(1, "on-demand")


def test_a_queue_whose_instance_types_we_cannot_read_is_never_refused() -> None:
    """An UNMANAGED compute environment lists no instance types; a family the catalog does not know
    may carry GPUs. Either makes the queue unknown: a warning, and the job is submitted."""
    unmanaged = QueueOffer("gpu-own", "on-demand", (), ("my-ce (UNMANAGED)",))
    refusal, warnings = check_offers([unmanaged], [H100])
    assert refusal is None and "cannot tell which GPUs" in warnings[0]
    assert offered_placement(Placement(0, None), [H100], {}, "gpu-own", {"gpu-own": unmanaged}) == Placement(0, None)
    assert unreadable_types(["g5", "x9gpu", "optimal", "p5.48xlarge"], instance_offers(["g5", "p5.48xlarge"])) == [
        "x9gpu"
    ]


def test_a_queue_known_to_launch_nothing_wanted_is_refused_with_what_it_offers() -> None:
    refusal, _ = check_offers([QueueOffer("gpu-spot", "spot", instance_offers(["g5"]))], [H100])
    assert refusal == "no queue can launch H100:8: queue gpu-spot (spot) offers g5 (A10G)"
