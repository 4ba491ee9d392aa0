"""The ``airflow-gpu`` command: output from the core, one-line errors with status 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from airflow_gpu import cli


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess[str]:
    """``cli.main`` in this process, as the console script calls it (``sys.exit(main())``): a
    traceback would fail the test, and the status is what the script exits with. One test below
    runs the installed script itself."""
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["airflow-gpu", *args], code, out, err)


def test_catalog_table_lists_every_type() -> None:
    out = cli.run(["catalog"])
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["TYPE", "VENDOR", "ARCHITECTURE"]
    assert {line.split()[0] for line in lines[2:]} >= {"H100", "MI300X", "Trainium2", "TPU-v5p"}
    assert [line.split()[0] for line in cli.run(["catalog", "--vendor", "aws"]).splitlines()[2:]] == [
        "Trainium",
        "Trainium2",
        "Inferentia2",
    ]


def test_catalog_detail_and_json() -> None:
    detail = cli.run(["catalog", "h100"])
    assert "MIG: 1g.10gb x7, 1g.20gb x4, 2g.20gb x3, 3g.40gb x2, 4g.40gb x1, 7g.80gb x1" in detail
    assert "p5.48xlarge" in detail and "NVIDIA-H100-NVL" in detail
    entries = json.loads(cli.run(["catalog", "--output", "json"]))
    assert [e["name"] for e in entries][:2] == ["V100", "T4"]
    (b200,) = json.loads(cli.run(["catalog", "B200", "--output", "json"]))
    assert b200["min_cuda"] == "12.8"


def test_describe_kubernetes_yaml() -> None:
    out = yaml.safe_load(cli.run(["describe", "H100:8", "--capacity", "spot", "--memory", "512Gi", "--cpu", "96"]))
    assert out["accelerator"]["spec"] == "H100:8"
    assert out["accelerator"]["compute_capability"] == "9.0"
    assert out["kubernetes"]["resources"]["limits"] == {"nvidia.com/gpu": "8", "memory": "512Gi"}
    assert out["kubernetes"]["volumes"][0]["emptyDir"]["sizeLimit"] == "65536Mi"


def test_describe_shows_what_an_unset_memory_resolves_to_and_every_variant_the_affinity_accepts() -> None:
    out = yaml.safe_load(cli.run(["describe", "H100:8"]))
    accelerator = out["accelerator"]
    assert accelerator["memory_gb"] == 80 and accelerator["requested"] == {"count": 8, "type": "H100"}
    assert accelerator["memory_from"] == "not set: the smallest of the 3 variants the placement accepts"
    variants = [(v["memory_gb"], v["form_factor"], v["gfd_product"]) for v in accelerator["variants"]]
    assert variants == [
        (80, "SXM", "NVIDIA-H100-80GB-HBM3"),
        (80, "PCIe", "NVIDIA-H100-PCIe"),
        (94, "NVL", "NVIDIA-H100-NVL"),
    ]
    [term] = out["kubernetes"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    products = next(e["values"] for e in term["matchExpressions"] if e["key"] == "nvidia.com/gpu.product")
    assert products == [product for _, _, product in variants]  # the node affinity asks for exactly these
    set_memory = yaml.safe_load(cli.run(["describe", "H100-94GB"]))["accelerator"]
    assert (set_memory["memory_gb"], set_memory["memory_from"], set_memory["form_factor"]) == (94, "as set", "NVL")
    mig = yaml.safe_load(cli.run(["describe", "A100-80GB-MIG-3g.40gb"]))["accelerator"]
    assert (mig["memory_gb"], mig["memory_from"]) == (40, "the MIG slice 3g.40gb")


@pytest.mark.parametrize(
    ("spec", "memory", "requested"),
    [("L4", 24, {"type": "L4"}), ("H100-SXM:8", 80, {"count": 8, "type": "H100", "form_factor": "SXM"})],
)
def test_describe_says_when_the_one_matching_variant_decides_the_memory(
    spec: str, memory: int, requested: dict[str, object]
) -> None:
    """Memory the user did not write is never "as set", even where only one variant matches."""
    accelerator = yaml.safe_load(cli.run(["describe", spec]))["accelerator"]
    kind = requested["type"]
    assert (accelerator["memory_gb"], accelerator["requested"]) == (memory, requested)
    assert accelerator["memory_from"] == f"not set: the one {kind} variant that matches"
    assert len(accelerator["variants"]) == 1


def test_describe_with_a_custom_label_scheme_and_mig() -> None:
    scheme = json.dumps({"gpu_label": "example.com/gpu", "gpu_values": {"A100": "a100"}})
    out = json.loads(
        cli.run(
            [
                "describe",
                "A100-MIG-3g.20gb",
                "--label-scheme",
                scheme,
                "--output",
                "json",
                "--shared-memory",
                "none",
            ]
        )
    )
    assert out["kubernetes"]["resources"]["limits"] == {"nvidia.com/mig-3g.20gb": "1"}
    expressions = out["kubernetes"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert expressions["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["a100"]
    assert out["kubernetes"]["volumes"] == []


def test_describe_batch() -> None:
    out = json.loads(cli.run(["describe", "trn2:16", "--target", "batch", "--output", "json"]))
    assert len(out["batch"]["containerProperties"]["linuxParameters"]["devices"]) == 16
    assert out["batch"]["instanceTypes"] == ["trn2.48xlarge"]


def test_recommend_table_and_json() -> None:
    out = cli.run(["recommend", "--params", "7B", "--task", "lora", "--precision", "bf16"])
    assert "= 19.5 GB" in out
    assert "No bf16 support: V100, T4" in out
    args = ["recommend", "--params", "13B", "--task", "finetune", "--vendor", "nvidia", "--output", "json"]
    data = json.loads(cli.run(args))
    assert data["estimate_gb"]["total"] == pytest.approx(13 * 16 * 1.3)  # 270.4 GB
    assert {"H100-80GB:4", "H200:3", "B200:2"} <= {r["accelerator"] for r in data["recommendations"]}
    assert "MI300X:2" not in {r["accelerator"] for r in data["recommendations"]}  # --vendor nvidia
    big = json.loads(cli.run(["recommend", "--params", "70B", "--task", "finetune", "--output", "json"]))
    assert "H100" in big["does_not_fit_one_node"]  # 1456 GB: more than 8 x 80 GB


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["describe", "H10:8"], "did you mean 'H100'"),
        (["describe", "MI300X", "--target", "batch"], "no AWS instance type carries it"),
        (["describe", "A10G", "--label-scheme", "gke"], "GKE does not offer it"),
        (["describe", "H100", "--memory", "lots"], "memory 'lots'"),
        (["describe"], "the following arguments are required: spec"),
        (["recommend", "--params", "seven"], "params 'seven'"),
        (["recommend", "--params", "7B", "--task", "dream"], "invalid choice: 'dream'"),
        (["teleport"], "invalid choice: 'teleport'"),
        ([], "the following arguments are required: command"),
    ],
)
def test_bad_input_is_one_line_and_status_2(args: list[str], fragment: str, capsys: pytest.CaptureFixture[str]) -> None:
    result = _run(capsys, *args)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("airflow-gpu: error: ")
    assert fragment in result.stderr
    assert "Traceback" not in result.stderr


def test_console_script_version_and_bad_input() -> None:
    """The installed script: its version, and bad input as status 2 with one line, no traceback."""
    from airflow_gpu import __version__

    script = str(Path(sys.executable).with_name("airflow-gpu"))
    result = subprocess.run([script, "--version"], capture_output=True, text=True, check=True, timeout=60)
    assert result.stdout.strip() == f"airflow-gpu {__version__}"
    bad = subprocess.run([script, "teleport"], capture_output=True, text=True, check=False, timeout=60)
    assert (bad.returncode, bad.stdout) == (2, "")
    assert bad.stderr.startswith("airflow-gpu: error: ") and bad.stderr.count("\n") == 1, bad.stderr


def test_images_prints_the_choice_and_why_and_the_catalog_without_an_accelerator() -> None:
    out = cli.run(["images", "--accelerator", "B200:8", "--driver", "570"])
    assert out.splitlines() == [
        "For B200:8: pytorch/pytorch:2.10.0-cuda12.8-cudnn9-runtime",
        "  - B200 (Blackwell, compute capability 10.0) needs CUDA >= 12.8",
        "  - driver 570 supports CUDA <= 12.8",
        "  - newest pytorch image in the pytorch catalog that meets them: pytorch 2.10.0, CUDA 12.8, runtime",
        "  - it needs a driver >= 570.26 on the nodes (CUDA 12.8)",
        "  (18 images looked at: --candidates lists them and what kept each out)",
    ]
    catalog = cli.run(["images"])
    rows = {line.split()[0]: line.split()[1:] for line in catalog.splitlines()[2:]}
    newest = rows["pytorch/pytorch:2.10.0-cuda13.0-cudnn9-runtime"]
    assert newest == ["pytorch", "2.10.0", "CUDA", "13.0", "runtime", "-"]
    assert any(image.startswith("rocm/pytorch") for image in rows)
    assert "nvcr.io" not in cli.run(["images", "--registry", "dockerhub"])  # the catalog of one registry


def test_images_candidates_say_what_kept_each_out() -> None:
    out = cli.run(["images", "--accelerator", "H100:8", "--driver", "535", "--registry", "dockerhub", "--candidates"])
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("pytorch/")}
    assert "For H100:8: pytorch/pytorch:2.7.1-cuda11.8-cudnn9-runtime" in out
    assert rows["pytorch/pytorch:2.7.1-cuda11.8-cudnn9-runtime"].endswith("chosen")
    assert rows["pytorch/pytorch:2.10.0-cuda13.0-cudnn9-runtime"].endswith(
        "driver 535 supports CUDA <= 12.2; the image has CUDA 13.0"
    )
    assert len(rows) == 18 and not any("devel" in image for image in rows)  # the runtime flavor only


def test_images_validate() -> None:
    ok = cli.run(["images", "--accelerator", "B200", "--validate", "pytorch/pytorch:2.8.0-cuda12.9-cudnn9-runtime"])
    assert ok.endswith("pytorch/pytorch:2.8.0-cuda12.9-cudnn9-runtime runs on B200")
    unknown = cli.run(["images", "--accelerator", "B200", "--validate", "acme/private:7"])
    assert unknown.endswith("acme/private:7 is accepted unchecked (its tag names no CUDA/ROCm/Neuron version) on B200")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["images", "--accelerator", "V100", "--validate", "pytorch/pytorch:2.10.0-cuda13.0-cudnn9-runtime"],
         "CUDA 13 dropped Volta"),
        (["images", "--accelerator", "H100", "--framework-version", "2.8", "--driver", "535"], "no pytorch 2.8 image"),
        (["images", "--validate", "x:1"], "--validate needs --accelerator"),
        (["images", "--candidates"], "--candidates needs --accelerator"),
        (["images", "--accelerator", "TPU-v5e"], "no TPU images"),
    ],
)  # fmt: skip
def test_images_errors_are_one_line(args: list[str], fragment: str, capsys: pytest.CaptureFixture[str]) -> None:
    result = _run(capsys, *args)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and fragment in result.stderr
