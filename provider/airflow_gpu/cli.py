"""``airflow-gpu``: look at the catalog, see what a spec becomes, size a model, pick an image, reap orphans.

Thin on purpose: every answer comes from the domain core (``reap``: the ``airflow_gpu.reap``
package), so the command and DAG code never disagree. Bad input, and an Airflow or cloud that
cannot be reached, exit with status 2 and one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from airflow_gpu import __version__
from airflow_gpu.accelerators import catalog
from airflow_gpu.accelerators.errors import AcceleratorSpecError

PROG = "airflow-gpu"


class _UsageError(Exception):
    """A command line that cannot be run; its message is printed as is."""


class _Incomplete(Exception):
    """The command ran, but part of what it was asked to do failed: print ``output``, exit 1."""

    def __init__(self, output: str) -> None:
        super().__init__(output)
        self.output = output


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse would print the whole usage first
        raise _UsageError(f"{message} (see '{self.prog} --help')")


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def render_catalog(vendor: str | None = None) -> str:
    """The catalog as a table, one line per accelerator type (like ``sky show-gpus``)."""
    rows = [
        [
            "TYPE",
            "VENDOR",
            "ARCHITECTURE",
            "CC",
            "MIN CUDA",
            "MEMORY (GB)",
            "FORM FACTORS",
            "MIG",
            "MAX/NODE",
            "AWS INSTANCES",
        ]
    ]
    for entry in catalog.CATALOG:
        if vendor is not None and entry.vendor != vendor:
            continue
        rows.append(
            [
                entry.name,
                entry.vendor,
                entry.architecture,
                entry.compute_capability or "-",
                entry.min_cuda or "-",
                "/".join(str(m) for m in entry.memory_variants),
                ", ".join(entry.form_factors),
                "yes" if entry.supports_mig else "-",
                str(entry.max_per_node),
                str(len(entry.instance_types)) if entry.instance_types else "-",
            ]
        )
    return _table(rows)


def render_type(name: str) -> str:
    """Everything the catalog knows about one type."""
    from airflow_gpu.accelerators.spec import Accelerator

    entry = Accelerator.parse(name).catalog_entry  # an unknown name raises with suggestions
    lines = [
        f"{entry.name} ({entry.vendor}, {entry.architecture})",
        f"  aliases:            {', '.join(entry.aliases) or '-'}",
        f"  compute capability: {entry.compute_capability or '-'}   minimum CUDA: {entry.min_cuda or '-'}"
        + (f"   last CUDA major: {entry.max_cuda_major}" if entry.max_cuda_major else ""),
        f"  precisions:         {', '.join(sorted(entry.precisions))}",
        f"  Kubernetes resource: {entry.resource_name}   max per node: {entry.max_per_node}",
        "  variants:",
    ]
    for variant in entry.variants:
        gfd, gke = variant.gfd_product or "-", variant.gke_accelerator or "-"
        lines.append(f"    {variant.label:<12} GFD: {gfd:<24} GKE: {gke}")
        if variant.mig_profiles:
            profiles = ", ".join(f"{p.name} x{p.max_instances}" for p in variant.mig_profiles)
            lines.append(f"      MIG: {profiles}")
    if entry.instance_types:
        lines.append("  AWS instance types:")
        for itype in entry.instance_types:
            lines.append(
                f"    {itype.name:<18} {itype.accelerators:>2} x {itype.memory_gb} GB   "
                f"{itype.vcpus} vCPUs, {itype.memory_gib} GiB"
            )
    return "\n".join(lines)


def _describe(args: argparse.Namespace) -> str:
    from airflow_gpu.accelerators.spec import Accelerator, parse_shorthand

    spec = Accelerator.parse(args.spec)
    output: dict[str, Any] = {"accelerator": _resolved(spec, parse_shorthand(args.spec))}
    if args.target == "kubernetes":
        from airflow_gpu.accelerators.kubernetes import to_kubernetes

        label_scheme: Any = args.label_scheme
        if label_scheme.lstrip().startswith("{"):
            label_scheme = json.loads(label_scheme)
        placement = to_kubernetes(
            spec,
            cpu=args.cpu,
            memory=_amount(args.memory),
            shared_memory=_amount(args.shared_memory),
            capacity=args.capacity,
            label_scheme=label_scheme,
            mig_strategy=args.mig_strategy,
        )
        output["kubernetes"] = placement.as_dict()
    else:
        from airflow_gpu.accelerators.batch import to_batch

        output["batch"] = to_batch(
            spec, vcpus=args.cpu, memory=_amount(args.memory), shared_memory=_amount(args.shared_memory)
        ).as_dict()
    if args.output == "json":
        return json.dumps(output, indent=2)
    import yaml  # Airflow depends on PyYAML; imported here to keep the other commands light

    return str(yaml.safe_dump(output, sort_keys=False, width=120)).rstrip()


def _resolved(spec: Any, requested: dict[str, Any]) -> dict[str, Any]:
    """What the spec stands for: the memory each device is sure to have and every catalog variant it
    matches, beside what the user wrote (``requested``: the shorthand's fields, before the model
    fills in what a single matching variant implies)."""
    variants = spec.variants
    if spec.mig is not None:
        memory_from = f"the MIG slice {spec.mig}"
    elif requested.get("memory_gb") is not None:
        memory_from = "as set"
    elif len(variants) == 1:
        memory_from = f"not set: the one {spec.type} variant that matches"
    else:
        memory_from = f"not set: the smallest of the {len(variants)} variants the placement accepts"
    return {
        "spec": str(spec),
        "type": spec.type,
        "count": spec.count,
        "memory_gb": spec.device_memory_gb,
        "memory_from": memory_from,
        "form_factor": spec.form_factor or " | ".join(dict.fromkeys(v.form_factor for v in variants)),
        "mig": spec.mig,
        "vendor": spec.vendor,
        "architecture": spec.architecture,
        "compute_capability": spec.compute_capability,
        "min_cuda": spec.min_cuda,
        "variants": [
            {
                "memory_gb": v.memory_gb,
                "form_factor": v.form_factor,
                "gfd_product": v.gfd_product,
                "gke_accelerator": v.gke_accelerator,
            }
            for v in variants
        ],
        "requested": requested,
    }


def _amount(value: str | None) -> int | str | None:
    """Plain digits are MiB, as in the Python API; anything else is a quantity or a keyword."""
    if value is None:
        return None
    return int(value) if value.isdigit() else value


def _recommend(args: argparse.Namespace) -> str:
    from airflow_gpu.accelerators import recommend as rec

    vendors = tuple(args.vendor) if args.vendor else None
    estimate = rec.estimate_memory(args.params, args.task, args.precision)
    results = rec.recommend(args.params, args.task, args.precision, vendors=vendors, include_mig=not args.no_mig)
    if args.output == "json":
        return json.dumps(
            {
                "estimate_gb": {
                    "weights": estimate.weights_gb,
                    "gradients": estimate.gradients_gb,
                    "optimizer": estimate.optimizer_gb,
                    "activations": estimate.activations_gb,
                    "total": estimate.total_gb,
                },
                "recommendations": [
                    {"accelerator": str(r.accelerator), "usable_gb": round(r.usable_gb, 1)} for r in results
                ],
                "does_not_fit_one_node": rec.not_fitting(args.params, args.task, args.precision, vendors),
                "unsupported_precision": rec.unsupported(args.precision, vendors),
            },
            indent=2,
        )
    model = rec.MEMORY_MODELS[args.task]
    lines = [
        f"{estimate.parameters / 1e9:g}B parameters, {args.task} in {args.precision}: {model.description}",
        f"  weights {estimate.weights_gb:.1f} GB + gradients {estimate.gradients_gb:.1f} GB + "
        f"optimizer {estimate.optimizer_gb:.1f} GB + activations {estimate.activations_gb:.1f} GB "
        f"= {estimate.total_gb:.1f} GB",
        f"  each device keeps {rec.DEVICE_RESERVE:.0%} for the CUDA context; memory is spread over one node's devices",
        "",
    ]
    if results:
        rows = [["ACCELERATOR", "USABLE GB", "HEADROOM GB"]]
        rows += [[str(r.accelerator), f"{r.usable_gb:.1f}", f"{r.headroom_gb:.1f}"] for r in results]
        lines.append(_table(rows))
    else:
        lines.append("No catalog accelerator holds this on one node.")
    too_small = rec.not_fitting(args.params, args.task, args.precision, vendors)
    if too_small:
        lines.append(f"\nNeeds more than one node: {', '.join(too_small)}")
    no_precision = rec.unsupported(args.precision, vendors)
    if no_precision:
        lines.append(f"No {args.precision} support: {', '.join(no_precision)}")
    return "\n".join(lines)


def _image_version(image: Any) -> str:
    return f"{image.framework} {'.'.join(map(str, image.framework_version))}" if image.framework_version else "-"


def _images(args: argparse.Namespace) -> str:
    """Without ``--accelerator`` the catalog; with it the answer and why (``--candidates``: every
    image looked at, and what kept each out)."""
    from airflow_gpu.images import catalog as image_catalog
    from airflow_gpu.images import selection

    if args.validate and not args.accelerator:
        raise _UsageError("--validate needs --accelerator (see 'airflow-gpu images --help')")
    if args.candidates and (not args.accelerator or args.validate):
        raise _UsageError("--candidates needs --accelerator and no --validate (see 'airflow-gpu images --help')")
    if not args.accelerator:
        family = selection.REGISTRIES.get(args.registry) if args.registry else None
        rows = [["IMAGE", "FRAMEWORK", "STACK", "FLAVOR", "PYTHON"]]
        for image in image_catalog.images():
            if family is None or image.family == family:
                row = [image.reference, _image_version(image), image.accelerator_stack, image.flavor or "-"]
                rows.append([*row, image.python or "-"])
        return _table(rows)
    if args.validate:
        info = selection.validate_image(args.validate, args.accelerator, args.driver, args.compatibility)
        verdict = (
            "runs"
            if info.platform != "unknown" and (info.cuda or info.rocm or info.neuron_sdk)
            else ("is accepted unchecked (its tag names no CUDA/ROCm/Neuron version)")
        )
        return f"{args.validate} {verdict} on {args.accelerator}"
    choice = selection.select_image(
        args.accelerator,
        framework=args.framework,
        framework_version=args.framework_version,
        cuda=args.cuda,
        driver_version=args.driver,
        flavor=args.flavor,
        registry=args.registry,
        compatibility=args.compatibility,
    )
    lines = [f"For {args.accelerator}: {choice.reference}", *(f"  - {reason}" for reason in choice.reasons)]
    if args.candidates:
        rows = [["IMAGE", "FRAMEWORK", "STACK", "VERDICT"]]
        for candidate in choice.candidates:
            image = candidate.image
            verdict = "chosen" if candidate.chosen else "; ".join(candidate.problems) or "runs (not the newest)"
            rows.append([image.reference, _image_version(image), image.accelerator_stack, verdict])
        lines += ["", _table(rows)]
    else:
        lines.append(f"  ({len(choice.candidates)} images looked at: --candidates lists them and what kept each out)")
    return "\n".join(lines)


def _emulate(args: argparse.Namespace) -> str:
    if args.backend == "batch":
        from airflow_gpu.testing.batch.emulator import BatchEmulator

        BatchEmulator(port=args.port, region=args.region).serve_forever(announce=lambda line: print(line, flush=True))
        return "stopped"
    from airflow_gpu.testing.kubernetes.emulator import KubernetesEmulator

    if args.scale is not None:
        from airflow_gpu.testing.kubernetes.scale import describe, scale_cluster

        emulator = KubernetesEmulator(scale_cluster(args.scale), port=args.port)
    else:
        emulator = KubernetesEmulator(args.cluster or "demo", port=args.port)

    def announce(running: KubernetesEmulator) -> None:
        print(
            f"Kubernetes API emulator ({running.spec.name} cluster, {len(running.spec.nodes)} nodes) at {running.url}"
        )
        if args.scale is not None:
            print(f"nodes: {describe(args.scale)}; simulated.local/... images run no process")
        print(f"kubeconfig: {args.kubeconfig}")
        print(f"export KUBECONFIG={args.kubeconfig}", flush=True)

    emulator.serve_forever(kubeconfig=args.kubeconfig, announce=announce)
    return "stopped"


def _duration(value: str) -> float:
    """``--grace``: seconds from ``90s``, ``10m``, ``1h``; a plain number is minutes."""
    units = {"s": 1, "m": 60, "h": 3600}
    number, unit = (value[:-1], value[-1]) if value[-1:] in units else (value, "m")
    try:
        seconds = float(number) * units[unit]
    except ValueError:
        seconds = -1
    if seconds < 0:
        raise argparse.ArgumentTypeError(f"a duration such as 90s, 10m or 1h; got {value!r}")
    return seconds


def _reap(args: argparse.Namespace) -> str:
    """Ask Airflow first: without its answers nothing may be judged, let alone deleted."""
    import os
    from datetime import timedelta

    from airflow_gpu.reap.airflow_api import AirflowApi, AirflowUnreachable
    from airflow_gpu.reap.reaper import reap, render

    url = args.airflow_url or os.environ.get("AIRFLOW_GPU_AIRFLOW_URL")
    if not url:
        raise _UsageError("reap needs Airflow's api-server: --airflow-url or AIRFLOW_GPU_AIRFLOW_URL")
    airflow = AirflowApi(
        url,
        token=os.environ.get("AIRFLOW_GPU_AIRFLOW_TOKEN") or None,
        username=args.airflow_user or os.environ.get("AIRFLOW_GPU_AIRFLOW_USER"),
        password=os.environ.get("AIRFLOW_GPU_AIRFLOW_PASSWORD"),
    )
    try:
        airflow.check()
        backends: list[Any] = []
        for backend in dict.fromkeys(args.backend or ["kubernetes", "batch"]):
            if backend == "kubernetes":
                from airflow_gpu.reap.kubernetes import KubernetesResources

                backends.append(KubernetesResources.connect(args.kubeconfig, args.context, args.namespace or ()))
            else:
                from airflow_gpu.reap.batch import BatchResources

                backends.append(BatchResources.connect(args.region, args.endpoint_url, args.job_queue or ()))
        report = reap(backends, airflow, delete=args.delete, grace=timedelta(seconds=args.grace))
    except AirflowUnreachable as error:
        raise AirflowUnreachable(f"{error}; nothing was deleted") from None
    output = render(report, args.output)
    if report.failed:
        raise _Incomplete(output)
    return output


def _node_count(value: str) -> int:
    """``--scale``: a whole number of nodes the scale cluster accepts (``scale.group_sizes``)."""
    from airflow_gpu.testing.kubernetes.cluster import MAX_GROUP_SIZE

    try:
        count = int(value)
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_GROUP_SIZE:
        raise argparse.ArgumentTypeError(f"a whole number of nodes from 1 to {MAX_GROUP_SIZE:,}; got {value!r}")
    return count


def build_parser() -> argparse.ArgumentParser:
    # Choices come from the core, so the command cannot drift from what the functions accept.
    from airflow_gpu.accelerators.kubernetes import CAPACITIES, MIG_STRATEGIES
    from airflow_gpu.accelerators.recommend import BYTES_PER_PARAMETER, MEMORY_MODELS
    from airflow_gpu.images.cuda import COMPATIBILITY_MODES
    from airflow_gpu.images.selection import FLAVORS, FRAMEWORKS, REGISTRIES

    vendors = sorted({e.vendor for e in catalog.CATALOG})
    parser = _Parser(prog=PROG, description="GPU and accelerator specs for Airflow tasks.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    show = commands.add_parser("catalog", help="list the accelerator catalog, or one type in detail")
    show.add_argument("type", nargs="?", help="a type or alias, e.g. H100 or trn2")
    show.add_argument("--vendor", choices=vendors)
    show.add_argument("--output", choices=["table", "json"], default="table")

    describe = commands.add_parser("describe", help="print what a spec becomes on Kubernetes or AWS Batch")
    describe.add_argument("spec", help="accelerator shorthand, e.g. H100:8 or A100-80GB-MIG-3g.40gb")
    describe.add_argument("--target", choices=["kubernetes", "batch"], default="kubernetes")
    describe.add_argument("--cpu", help="cores (Kubernetes) or vCPUs (Batch)")
    describe.add_argument("--memory", help="MiB as a number, or a quantity such as 64Gi")
    describe.add_argument("--shared-memory", default="auto", help="/dev/shm size: auto, none, MiB or a quantity")
    describe.add_argument("--capacity", choices=CAPACITIES)
    describe.add_argument(
        "--label-scheme", default="nvidia-gfd", help="nvidia-gfd, gke, karpenter, none, or a JSON mapping"
    )
    describe.add_argument("--mig-strategy", choices=MIG_STRATEGIES, default="mixed")
    describe.add_argument("--output", choices=["yaml", "json"], default="yaml")

    recommend = commands.add_parser("recommend", help="the fewest accelerators that hold a model")
    recommend.add_argument("--params", required=True, help="parameter count, e.g. 7B, 350M, 1.5b")
    recommend.add_argument("--task", choices=list(MEMORY_MODELS), default="inference")
    recommend.add_argument("--precision", choices=list(BYTES_PER_PARAMETER), default="bf16")
    recommend.add_argument("--vendor", action="append", choices=vendors)
    recommend.add_argument("--no-mig", action="store_true", help="whole devices only")
    recommend.add_argument("--output", choices=["table", "json"], default="table")

    images = commands.add_parser("images", help="pick the image for an accelerator, or list the image catalog")
    images.add_argument("--accelerator", help="select (or with --validate, check) an image for this spec")
    images.add_argument("--framework", choices=FRAMEWORKS, default="pytorch")
    images.add_argument("--framework-version", help="e.g. 2.8 or 2.8.0")
    images.add_argument("--cuda", help="CUDA major or major.minor, e.g. 12 or 12.8")
    images.add_argument("--driver", help="NVIDIA driver of the nodes, e.g. 535 or 550.54.14")
    images.add_argument("--flavor", choices=FLAVORS, default="runtime")
    images.add_argument("--registry", choices=list(REGISTRIES))
    images.add_argument("--compatibility", choices=COMPATIBILITY_MODES, default="strict")
    images.add_argument("--validate", metavar="IMAGE", help="check an image reference instead of selecting one")
    images.add_argument(
        "--candidates", action="store_true", help="with --accelerator: every image looked at, and what kept each out"
    )

    emulate = commands.add_parser("emulate", help="serve a local emulator of a cloud API")
    emulated = emulate.add_subparsers(dest="backend", required=True, parser_class=_Parser)
    kubernetes = emulated.add_parser("kubernetes", help="a Kubernetes API with GPU nodes and spot faults")
    cluster = kubernetes.add_mutually_exclusive_group()
    cluster.add_argument("--cluster", help="'demo' (the default) or a cluster YAML file")
    cluster.add_argument(
        "--scale",
        type=_node_count,
        metavar="NODES",
        help="a GPU fleet of NODES virtual nodes (H100, A100, L4, CPU; spot and on-demand) for load tests",
    )
    kubernetes.add_argument("--kubeconfig", default=".emulator/kubeconfig", help="where to write the kubeconfig")
    kubernetes.add_argument("--port", type=int, default=0, help="0 picks a free port")
    batch = emulated.add_parser("batch", help="AWS Batch with GPU queues (gpu-spot, gpu-on-demand) and spot faults")
    batch.add_argument("--port", type=int, default=0, help="0 picks a free port")
    batch.add_argument("--region", default="us-east-1")

    reaper = commands.add_parser(
        "reap", help="find (and with --delete, delete) pods, training Jobs and Batch jobs whose task try has ended"
    )
    reaper.add_argument("--delete", action="store_true", help="delete the orphans (without it they are only listed)")
    reaper.add_argument(
        "--grace", type=_duration, default=600.0, metavar="DURATION",
        help="leave work younger than this, or whose task ended less than this ago (90s, 10m, 1h; default 10m)",
    )  # fmt: skip
    reaper.add_argument("--backend", action="append", choices=["kubernetes", "batch"], help="default: both")
    reaper.add_argument("--output", choices=["table", "json"], default="table")
    airflow = reaper.add_argument_group("Airflow (its REST API; token or password from the environment)")
    airflow.add_argument("--airflow-url", help="the api-server's base URL (or AIRFLOW_GPU_AIRFLOW_URL)")
    airflow.add_argument(
        "--airflow-user", help="exchanged for a token with AIRFLOW_GPU_AIRFLOW_PASSWORD (or AIRFLOW_GPU_AIRFLOW_USER); "
        "AIRFLOW_GPU_AIRFLOW_TOKEN instead gives the token itself",
    )  # fmt: skip
    cluster_args = reaper.add_argument_group("Kubernetes")
    cluster_args.add_argument("--namespace", action="append", help="repeatable; default: every namespace listable")
    cluster_args.add_argument("--kubeconfig", help="default: $KUBECONFIG, ~/.kube/config, or in-cluster")
    cluster_args.add_argument("--context", help="a kubeconfig context")
    aws = reaper.add_argument_group("AWS Batch")
    aws.add_argument("--region", help="default: the AWS configuration's")
    aws.add_argument("--job-queue", action="append", help="repeatable; default: every queue")
    aws.add_argument("--endpoint-url", help="another Batch endpoint (moto, the emulator)")
    return parser


def _catalog(args: argparse.Namespace) -> str:
    if args.output == "json":
        from dataclasses import asdict

        from airflow_gpu.accelerators.spec import Accelerator

        selected = [Accelerator.parse(args.type).catalog_entry] if args.type else catalog.CATALOG
        entries = [asdict(e) for e in selected if args.vendor in (None, e.vendor)]
        return json.dumps(entries, indent=2, default=sorted)
    return render_type(args.type) if args.type else render_catalog(args.vendor)


def run(argv: Sequence[str] | None = None) -> str:
    """Run a command line and return what it prints; raises on bad input."""
    args = build_parser().parse_args(argv)
    handlers = {
        "catalog": _catalog,
        "describe": _describe,
        "recommend": _recommend,
        "images": _images,
        "emulate": _emulate,
        "reap": _reap,
    }
    return handlers[args.command](args)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        print(run(argv))
    except _Incomplete as incomplete:
        print(incomplete.output)
        return 1
    except (_UsageError, AcceleratorSpecError, ValueError, OSError) as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `airflow-gpu catalog | head`
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
