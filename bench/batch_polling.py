"""DescribeJobs calls per poll interval while N deferred GPU jobs wait: ours vs the official trigger.

N jobs are submitted to the Batch emulator and held RUNNABLE (the spot compute environment has
no capacity), so every trigger keeps polling. Each kind of trigger then waits on all N at once,
as N deferred mapped tasks do in one triggerer, for a few poll intervals; the emulator's own
DescribeJobs handler counts the calls. Baseline, in the same run: the amazon provider's
``BatchJobTrigger``, one waiter per job.

    python bench/batch_polling.py [--jobs 300] [--interval 2] [--intervals 3]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from airflow_gpu.testing.batch.emulator import BatchEmulator


def _count_describe_jobs() -> list[int]:
    """Wrap moto's DescribeJobs so each API call (whatever the client) is counted once."""
    from moto.batch.models import BatchBackend

    counter = [0]
    original = BatchBackend.describe_jobs

    def counted(self: Any, jobs: Any) -> Any:
        counter[0] += 1
        return original(self, jobs)

    BatchBackend.describe_jobs = counted  # type: ignore[method-assign]
    return counter


async def _measure_async(
    triggers: list[Any], first_round: int, interval: float, intervals: int, counter: list[int]
) -> float:
    """Calls per interval once every trigger is polling (setting up 300 clients takes a while)."""

    async def consume(events: AsyncIterator[Any]) -> None:
        async for _ in events:
            return

    start = counter[0]
    tasks = [asyncio.create_task(consume(t.run())) for t in triggers]
    deadline = time.monotonic() + 300
    while counter[0] - start < first_round and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    before = counter[0]
    await asyncio.sleep(interval * intervals)
    calls = counter[0] - before
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return calls / intervals


def _measure(
    make: Callable[[str], Any], ids: list[str], first_round: int, interval: float, intervals: int, counter: list[int]
) -> float:
    return asyncio.run(_measure_async([make(i) for i in ids], first_round, interval, intervals, counter))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--intervals", type=int, default=3)
    args = parser.parse_args()

    logging.getLogger("airflow").setLevel(logging.WARNING)  # 300 waiters log every poll
    with BatchEmulator() as emulator:
        os.environ["AIRFLOW_CONN_AWS_DEFAULT"] = emulator.airflow_connection_uri()
        from airflow.providers.amazon.aws.triggers.batch import BatchJobTrigger

        from airflow_gpu.triggers.batch import GPUBatchJobTrigger

        batch = emulator.client("batch")
        batch.register_job_definition(
            jobDefinitionName="shard",
            type="container",
            containerProperties={
                "image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
                "command": ["true"],
                "resourceRequirements": [
                    {"type": "GPU", "value": "1"},
                    {"type": "VCPU", "value": "4"},
                    {"type": "MEMORY", "value": "15000"},
                ],
            },
        )
        emulator.stall("gpu-spot-ce")
        ids = [
            batch.submit_job(jobName=f"shard-{i}", jobQueue="gpu-spot", jobDefinition="shard")["jobId"]
            for i in range(args.jobs)
        ]
        counter = _count_describe_jobs()
        start = time.perf_counter()
        ours = _measure(
            lambda job_id: GPUBatchJobTrigger(job_id=job_id, poll_interval=args.interval),
            ids, (len(ids) + 99) // 100, args.interval, args.intervals, counter,
        )  # fmt: skip
        official = _measure(
            lambda job_id: BatchJobTrigger(job_id=job_id, waiter_delay=int(args.interval), waiter_max_attempts=1000),
            ids, len(ids), args.interval, args.intervals, counter,
        )  # fmt: skip
        elapsed = time.perf_counter() - start
    print(
        f"{args.jobs} deferred jobs, polled every {args.interval:g} s for {args.intervals} intervals ({elapsed:.0f} s)"
    )
    print(f"  GPUBatchJobTrigger (shared poller, 100 ids per call): {ours:8.1f} DescribeJobs calls per interval")
    print(f"  BatchJobTrigger (amazon provider, one waiter per job): {official:7.1f} DescribeJobs calls per interval")
    if ours:
        print(f"  {official / ours:.0f}x fewer calls")


if __name__ == "__main__":
    main()
