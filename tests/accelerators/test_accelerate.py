"""``AccelerateLaunch``: the ``accelerate launch`` argument lists, and what is refused at parse time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_gpu import AcceleratorSpecError
from airflow_gpu.accelerators.accelerate import AccelerateLaunch


def launch(**kwargs: Any) -> AccelerateLaunch:
    return AccelerateLaunch(**{"training_script": "train.py", "target": "kubernetes", **kwargs})


def flags(argv: list[str]) -> dict[str, str | None]:
    """``--name value`` pairs (None for a flag alone), up to the script."""
    found: dict[str, str | None] = {}
    args = argv[2 : argv.index("train.py")]
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            nxt = args[i + 1] if i + 1 < len(args) else None
            found[arg] = None if nxt is None or nxt.startswith("--") else nxt
    return found


def test_one_machine_of_eight_gpus_runs_eight_processes_with_every_choice_explicit() -> None:
    """An image's default_config.yaml would override any default: every choice is a flag."""
    argv = launch(accelerator="H100:8", mixed_precision="bf16", script_args=("--epochs", "3")).argv()
    assert argv[:2] == ["accelerate", "launch"] and argv[-3:] == ["train.py", "--epochs", "3"]
    got = flags(argv)
    assert got["--num_processes"] == "8" and got["--num_machines"] == "1" and "--multi_gpu" in got
    assert got["--mixed_precision"] == "bf16" and got["--dynamo_backend"] == "no"
    assert "--machine_rank" not in got and got["--main_process_port"] == "29500"


def test_num_processes_is_the_total_over_all_machines() -> None:
    two = launch(accelerator="A100:4", num_machines=2)
    assert (two.total_processes, two.processes_per_machine) == (8, 4)
    got = flags(two.argv(machine_rank="$JOB_COMPLETION_INDEX", main_process_ip="train-0.train"))
    assert got["--num_processes"] == "8" and got["--num_machines"] == "2"
    assert got["--machine_rank"] == "$JOB_COMPLETION_INDEX" and got["--main_process_ip"] == "train-0.train"
    with pytest.raises(ValueError, match="main_process_ip"):
        two.argv()


def test_a_machine_without_gpus_trains_on_cpu_over_gloo(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    one = AccelerateLaunch(training_script=str(script))
    assert "--cpu" in one.argv() and "--multi_gpu" not in one.argv()
    two = AccelerateLaunch(training_script=str(script), num_processes=2)
    assert "--multi_gpu" in two.argv() and "--cpu" not in two.argv()
    assert two.environment() == {"ACCELERATE_USE_CPU": "1"} and launch(accelerator="L4").environment() == {}


def test_fsdp_and_deepspeed_start_their_own_processes() -> None:
    fsdp = launch(accelerator="H100:8", fsdp={"sharding_strategy": "FULL_SHARD", "offload_params": False}).argv()
    got = flags(fsdp)
    assert "--use_fsdp" in got and "--multi_gpu" not in got
    assert got["--fsdp_sharding_strategy"] == "FULL_SHARD" and got["--fsdp_offload_params"] == "false"
    deepspeed = flags(launch(accelerator="H100:8", deepspeed_config="ds.json").argv())
    assert deepspeed["--deepspeed_config_file"] == "ds.json" and "--multi_gpu" not in deepspeed
    assert flags(launch(accelerator="L4", accelerate_config_file="cfg.yaml").argv())["--config_file"] == "cfg.yaml"


@pytest.mark.parametrize(
    ("kwargs", "field", "said"),
    [
        ({"accelerator": "L4:2", "num_processes": 3}, "num_processes", "3 processes per machine"),
        ({"accelerator": "L4:2", "num_machines": 2, "num_processes": 3}, "num_processes", "not a multiple"),
        ({"accelerator": "V100", "mixed_precision": "bf16"}, "mixed_precision", "7.0"),
        ({"accelerator": "T4", "mixed_precision": "bf16"}, "mixed_precision", "7.5"),
        ({"accelerator": "A100", "mixed_precision": "fp8"}, "mixed_precision", "8.9"),
        ({"accelerator": "L4", "fsdp": True, "deepspeed_config": "ds.json"}, "fsdp", "deepspeed"),
        ({"accelerator": "A10G:4", "num_machines": 2, "target": "batch", "capacity": "spot"}, "num_machines", "Spot"),
        ({"accelerator": "L4", "target": "local", "training_script": "/no/such/train.py"}, "training_script", "exist"),
        ({"accelerator": "L4", "mixed_precision": "fp4"}, "mixed_precision", ""),
        ({"accelerator": "L4", "num_machines": 0}, "num_machines", ""),
    ],
)
def test_refused_at_parse_time_naming_the_field_and_what_is_accepted(
    kwargs: dict[str, Any], field: str, said: str
) -> None:
    with pytest.raises(AcceleratorSpecError) as error:
        launch(**kwargs)
    assert error.value.field == field and said in str(error.value)


def test_what_is_accepted() -> None:
    assert launch(accelerator="H100:8", mixed_precision="fp8").total_processes == 8
    assert launch(accelerator="L40S", mixed_precision="fp8").mixed_precision == "fp8"  # Ada: 8.9
    assert launch(accelerator="A10G:4", num_machines=2, target="batch", capacity="on-demand").num_machines == 2
    assert launch(accelerator="MI300X:8", mixed_precision="bf16").total_processes == 8  # AMD: not checked here


def test_a_config_file_decides_what_was_not_asked_for_here() -> None:
    """accelerate reads a config's distributed type and precision only where no flag gives them."""
    got = flags(launch(accelerator="H100:8", accelerate_config_file="fsdp.yaml").argv())
    assert got["--config_file"] == "fsdp.yaml" and got["--num_processes"] == "8"
    assert not {"--multi_gpu", "--mixed_precision", "--dynamo_backend"} & set(got)
    asked = flags(launch(accelerator="H100:8", accelerate_config_file="fsdp.yaml", mixed_precision="bf16").argv())
    assert asked["--mixed_precision"] == "bf16"


def test_deepspeed_on_several_machines_uses_the_standard_launcher_not_pdsh() -> None:
    two = launch(accelerator="H100:8", num_machines=2, deepspeed_config="ds.json")
    got = flags(two.argv(machine_rank="$JOB_COMPLETION_INDEX", main_process_ip="train-0.train"))
    assert got["--deepspeed_multinode_launcher"] == "standard"
    assert "--deepspeed_multinode_launcher" not in flags(
        launch(accelerator="H100:8", deepspeed_config="ds.json").argv()
    )
