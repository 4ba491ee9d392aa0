"""The driver table of DESIGN.md and the minor-version compatibility rule."""

from __future__ import annotations

import pytest

from airflow_gpu.images.cuda import driver_limit_text, driver_runs, max_cuda_for_driver, parse_version


@pytest.mark.parametrize(
    ("driver", "newest"),
    [("520.61.05", (11, 8)), ("525.60.13", (12, 0)), ("535", (12, 2)), ("535.104.05", (12, 2)),
     ("550.54.14", (12, 4)), ("560.28.03", (12, 6)), ("570.26", (12, 8)), ("575.51.03", (12, 9)),
     ("580.65.06", (13, 0)), ("470.82.01", None)],
)  # fmt: skip
def test_newest_toolkit_of_a_driver(driver: str, newest: tuple[int, int] | None) -> None:
    assert max_cuda_for_driver(parse_version(driver)) == newest


def test_strict_and_minor_version_rules() -> None:
    driver = parse_version("535.104.05")
    assert driver_runs((12, 2), driver) and not driver_runs((12, 4), driver)
    assert driver_runs((12, 8), driver, "minor-version")  # 12.x on >= 525 with minor-version compatibility
    assert not driver_runs((13, 0), driver, "minor-version")
    assert not driver_runs((12, 0), parse_version("520"), "minor-version")
    assert driver_limit_text(driver, label="535.104.05") == "driver 535.104.05 supports CUDA <= 12.2"
    assert driver_limit_text(driver, "minor-version") == "driver 535.104.5 runs CUDA 11.x and 12.x"


def test_bad_versions() -> None:
    with pytest.raises(ValueError, match="not a version"):
        parse_version("latest")
