"""``BatchEmulator``: moto's AWS server with a GPU Batch account whose jobs really run.

moto serves the Batch, CloudWatch Logs, EC2 and IAM APIs on a local port (``ThreadedMotoServer``)
from this process, so the driver reaches its backend objects directly. Where moto's Batch differs
from AWS, ``patches.py`` replaces it while emulators live (SubmitJob only records an
``EmulatedJob``; the driver runs it). Airflow's ``aws_default`` points here through the
connection's ``endpoint_url`` extra, as at a real account. The defaults are AWS's behaviour, the
inconvenient parts included: log lines readable only after an ingestion delay, blocked-job
reasons only on the head of a queue.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import signal
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from typing import Any

if importlib.util.find_spec("moto") is None:  # pragma: no cover - depends on the installed extras
    # Looked up, not imported: moto's import (half a second) waits for the first emulator's start.
    raise ImportError("The AWS Batch emulator needs moto's server: pip install 'airflow-provider-gpu[batch-emulator]'")

from airflow_gpu.testing.batch.compute import DEMO, BatchSetup, create
from airflow_gpu.testing.batch.reasons import INSUFFICIENT_CAPACITY
from airflow_gpu.testing.images import Image, ImageSet, RegistryApp

ACCOUNT = "123456789012"
#: moto keeps one backend per (account, region) for the whole process: each live emulator in a
#: process takes a region of its own, and only the last one to stop resets moto. Twenty-eight (of
#: the regions Batch has): the end-to-end tests run each scenario against an emulator of its own,
#: all at once, and a nineteenth Batch scenario found the old eighteen all taken.
REGIONS = (
    "us-east-1", "us-west-2", "us-east-2", "eu-west-1", "eu-central-1", "ap-northeast-1", "ap-southeast-2",
    "us-west-1", "ca-central-1", "eu-west-2", "eu-west-3", "eu-north-1", "ap-south-1", "ap-northeast-2",
    "ap-southeast-1", "sa-east-1", "ap-northeast-3", "eu-south-1", "ap-east-1", "me-south-1", "af-south-1",
    "eu-south-2", "ap-southeast-3", "eu-central-2", "ap-south-2", "me-central-1", "il-central-1", "ca-west-1",
)  # fmt: skip
_live_regions: set[str] = set()
_lock = threading.Lock()
#: How long CloudWatch Logs takes before a line a job wrote can be read (``logs.py``).
LOG_INGESTION_DELAY = 1.5


class BatchEmulator:
    """A local AWS Batch with GPU compute environments, spot faults and jobs that run as processes."""

    def __init__(
        self,
        setup: BatchSetup = DEMO,
        host: str = "127.0.0.1",
        port: int = 0,
        region: str | None = None,
        stop_timeout: float = 30.0,
        log_ingestion_delay: float = LOG_INGESTION_DELAY,
        capacity_reasons: bool = True,
        cancel_at_head: bool = False,
        images: Mapping[str, Image] | None = None,
        missing_images: Iterable[str] = (),
    ) -> None:
        """``region`` None takes the first region no other emulator of this process uses.

        ``log_ingestion_delay``: seconds before a line a job wrote is readable in CloudWatch Logs (0:
        at once). ``capacity_reasons`` False: the Batch service role lacks
        ``autoscaling:DescribeScalingActivities`` and ``ec2:DescribeSpotFleetRequestHistory``, so no
        job stuck for capacity shows ``CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY``. ``cancel_at_head``:
        CancelJob on a RUNNABLE job takes effect only once the job heads its queue (``jobs.py``).
        ``images``: reference -> ``testing.images.Image``, what the registry's config says of an image
        (its ENTRYPOINT, Cmd) and what it holds (no ``sh`` in a distroless one); its jobs run as Docker
        runs them, and ``/v2/`` on this endpoint serves the configs as a registry mirror
        (``registry_mirror`` in the connection's extra). ``missing_images`` do not exist.
        """
        self.setup, self.host, self.port = setup, host, port
        self.requested_region = region
        self.region = region or REGIONS[0]
        self.stop_timeout = stop_timeout
        self.log_ingestion_delay, self.capacity_reasons = log_ingestion_delay, capacity_reasons
        self.cancel_at_head = cancel_at_head
        self.images = ImageSet(images, missing_images)
        self.faults: list[dict[str, Any]] = []
        self._server: Any = None
        self._throttle: Any = None
        self.driver: Any = None
        self._clients: dict[str, Any] = {}
        self._clients_lock = threading.Lock()

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> BatchEmulator:
        from moto.batch.models import batch_backends
        from moto.logs.models import logs_backends
        from moto.server import ThreadedMotoServer

        import airflow_gpu.testing.batch.patches as patches
        from airflow_gpu.testing.batch.driver import BatchDriver
        from airflow_gpu.testing.batch.throttle import Faults

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        with _lock:
            free = [
                r for r in ([self.requested_region] if self.requested_region else REGIONS) if r not in _live_regions
            ]
            if not free:
                raise RuntimeError(f"region {self.requested_region or REGIONS} is taken by another live emulator")
            self.region = free[0]
            first = not _live_regions
            _live_regions.add(self.region)
            if first:
                patches.apply()
        with self._clients_lock:  # any made before start point at no server, or another region
            self._clients.clear()
        self._server = ThreadedMotoServer(ip_address=self.host, port=self.port, verbose=False)
        self._server.start()
        wsgi = self._server._server  # werkzeug's server takes ``.app`` anew for each request
        self._throttle = Faults(wsgi.app)
        wsgi.app = RegistryApp(self.images, self._throttle)
        self.host, self.port = self._server.get_host_and_port()
        calls = [("/moto-api/config", {"batch": {"use_docker": False}})]
        if first:  # moto's backends live as long as the process: the first emulator starts them empty
            calls.insert(0, ("/moto-api/reset", {}))
        for path, body in calls:
            request = urllib.request.Request(
                f"{self.endpoint_url}{path}", data=json.dumps(body).encode(), method="POST"
            )
            urllib.request.urlopen(request, timeout=30).close()
        if not first:  # a region an earlier emulator of this process used starts empty too
            from moto.ec2.models import ec2_backends

            for backends in (batch_backends, logs_backends, ec2_backends):
                backends[ACCOUNT][self.region].reset()
        create(self.setup, self.client)
        self.driver = BatchDriver(
            batch_backends[ACCOUNT][self.region],
            logs_backends[ACCOUNT][self.region],
            {ce.name: ce.offers for ce in self.setup.compute_environments},
            stop_timeout=self.stop_timeout,
            log_ingestion_delay=self.log_ingestion_delay,
            max_vcpus={ce.name: ce.max_vcpus for ce in self.setup.compute_environments},
            capacity_reasons=self.capacity_reasons,
            cancel_at_head=self.cancel_at_head,
            images=self.images,
        )
        self.driver.start()
        return self

    def stop(self) -> None:
        with self._clients_lock:  # they point at this server's port
            for client in self._clients.values():
                client.close()
            self._clients.clear()
        if self.driver is not None:
            self.driver.stop()
            self.driver = None
        if self._server is not None:
            self._stop_server(self._server)
            self._server = None
            with _lock:
                _live_regions.discard(self.region)
                if not _live_regions:
                    import airflow_gpu.testing.batch.patches as patches

                    patches.restore()

    def _stop_server(self, server: Any, timeout: float = 30) -> None:
        """moto's ``ThreadedMotoServer.stop``, without its half-second wait: the server's loop looks
        at its shutdown request once per ``select`` timeout (0.5 s, socketserver's default), so a
        connection is opened to wake it at once. Every test that starts an emulator stops one."""
        errors: list[BaseException] = []

        def stop() -> None:
            try:
                server.stop()
            except BaseException as error:  # re-raised below, in the caller's thread
                errors.append(error)

        stopper = threading.Thread(target=stop, name="batch-emulator-stop", daemon=True)
        stopper.start()
        deadline = time.monotonic() + timeout
        while stopper.is_alive() and time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                socket.create_connection((self.host, self.port), timeout=0.2).close()
            stopper.join(0.01)
        if errors:
            raise errors[0]
        if stopper.is_alive():
            raise RuntimeError(f"the Batch emulator's server on port {self.port} did not stop within {timeout:g} s")

    def __enter__(self) -> BatchEmulator:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def serve_forever(self, announce: Callable[[str], Any] = print) -> None:
        """Serve until SIGINT or SIGTERM (``airflow-gpu emulate batch``), then stop every job process."""
        done = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: done.set())
        with self:
            announce(f"AWS Batch emulator on {self.endpoint_url} (region {self.region})")
            announce("queues: " + ", ".join(q.name for q in self.setup.queues))
            announce(f"export AIRFLOW_CONN_AWS_DEFAULT='{self.airflow_connection_uri()}'")
            done.wait()

    # --- how to reach it ------------------------------------------------------------------

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def client(self, service: str) -> Any:
        """A boto3 client of ``service`` (``batch``, ``logs``) pointed here: one per service, shared
        (boto3 clients are thread-safe). Building one reads botocore's JSON service model, tens of
        milliseconds of CPU each time: a test that polls would spend most of its time on that."""
        with self._clients_lock:
            if service not in self._clients:
                import boto3

                self._clients[service] = boto3.client(
                    service,
                    endpoint_url=self.endpoint_url,
                    region_name=self.region,
                    aws_access_key_id="testing",
                    aws_secret_access_key="testing",
                )
            return self._clients[service]

    def airflow_connection(self) -> dict[str, Any]:
        """Airflow's ``aws_default`` as JSON (``AIRFLOW_CONN_AWS_DEFAULT``), pointed here."""
        return {
            "conn_type": "aws",
            "login": "testing",
            "password": "testing",
            "extra": {
                "endpoint_url": self.endpoint_url,
                "region_name": self.region,
                "registry_mirror": self.endpoint_url,
            },
        }

    def airflow_connection_uri(self) -> str:
        return json.dumps(self.airflow_connection())

    # --- faults ---------------------------------------------------------------------------

    def _job(self, job_id: str) -> Any:
        job = self.driver.backend._jobs.get(job_id)
        if job is None:
            raise KeyError(f"no job {job_id}")
        return job

    def reclaim(self, job_id: str, hard: bool = False) -> None:
        """A spot reclaim of the job's host: SIGTERM then SIGKILL (exit 143), or at once (``hard``: no exit code).

        A multi-node parallel job runs on one host per node: ``<jobId>#<n>`` names the node whose host
        goes (a host failure, as MNP jobs do not run on Spot); the job's own id names its main node.
        """
        from airflow_gpu.testing.batch.nodes import MultiNodeJob

        job = self._job(job_id)
        if isinstance(job, MultiNodeJob):
            if job.main is None:
                raise ValueError(f"job {job_id} is {job.status}: its main node has not been launched")
            job = job.main
            job_id = job.job_id
        if job.status != "RUNNING":
            raise ValueError(f"job {job_id} is {job.status}, not RUNNING")
        job.reclaim = {"hard": hard}
        self.faults.append({"fault": "reclaim", "job": job_id, "instance": job.instance_id, "hard": hard})

    def stall(self, compute_environment: str, reason: str | None = INSUFFICIENT_CAPACITY) -> None:
        """No capacity: jobs that could only run here stay RUNNABLE; the head of their queue shows ``reason``.

        ``reason`` is a documented code (``reasons.py``: ``CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY``,
        ``MISCONFIGURATION:SERVICE_ROLE_PERMISSIONS``, ``UNDETERMINED``...), shown with AWS's message, or
        None: Batch cannot tell why, and no job shows a reason.
        """
        self.driver.stalled[compute_environment] = reason
        self.faults.append({"fault": "stall", "compute_environment": compute_environment, "reason": reason})

    def release(self, compute_environment: str) -> None:
        self.driver.stalled.pop(compute_environment, None)
        self.faults.append({"fault": "release", "compute_environment": compute_environment})

    def declare_image(self, reference: str, image: Image) -> None:
        """From now on ``reference`` is ``image`` (ENTRYPOINT, Cmd, programs), for the registry and the runtime."""
        self.images.declare(reference, image)
        self.faults.append({"fault": "image", "reference": reference, "entrypoint": list(image.entrypoint)})

    def throttle(self, operation: str = "DescribeJobs", times: int = 1) -> None:
        """The next ``times`` calls of ``operation`` are throttled: Batch answers HTTP 429
        ``TooManyRequestsException``, CloudWatch Logs (``GetLogEvents``...) 400 ``ThrottlingException``."""
        self._throttle.arm(operation, times)
        self.faults.append({"fault": "throttle", "operation": operation, "times": times})

    def fail(
        self, operation: str, kind: str = "server", times: int = 1, rate: float = 1.0, seed: int | None = 0
    ) -> Any:
        """The next ``times`` calls of the Batch or CloudWatch Logs ``operation`` fail transiently
        (``throttle.py``): ``throttle``, ``server`` (500 ``ServerException``), ``unavailable`` (503),
        ``reset`` (the connection drops before the service sees the call) or ``lost`` (it drops after
        the service acted: a SubmitJob's job exists, its answer never came). With ``rate`` < 1 each
        call fails with that probability (``seed``: repeatable) until ``times`` failed. The returned
        record's ``hits`` counts the calls failed so far."""
        armed = self._throttle.arm(operation, times, kind, rate, seed)
        self.faults.append({"fault": kind, "operation": operation, "times": times, "rate": rate, "seed": seed})
        return armed

    def slow(self, operation: str, seconds: float, times: int = 1) -> Any:
        """The next ``times`` calls of ``operation`` are acted on at once and answered ``seconds`` later (a
        SubmitJob's job exists while its caller still waits for the id). The returned record's ``hits``
        counts the calls that arrived."""
        armed = self._throttle.arm(operation, times, "slow", seconds=seconds)
        self.faults.append({"fault": "slow", "operation": operation, "times": times, "seconds": float(seconds)})
        return armed

    def list_lag(self, seconds: float) -> None:
        """From now on a job is missing from ListJobs until ``seconds`` after it was submitted (0: listed at
        once, moto's way). ListJobs is eventually consistent on AWS: a client that looks a just-submitted
        job up by name (a SubmitJob whose answer was lost) may not find it yet. DescribeJobs by id is
        not delayed."""
        self.driver.backend.emulator_list_lag = float(seconds)
        self.faults.append({"fault": "list_lag", "seconds": float(seconds)})

    def jobs(self) -> list[Any]:
        """The submitted jobs: no array children (``<id>:<i>``), no multi-node parallel nodes (``<id>#<n>``)."""
        return [j for j in self.driver.backend._jobs.values() if ":" not in j.job_id and "#" not in j.job_id]
