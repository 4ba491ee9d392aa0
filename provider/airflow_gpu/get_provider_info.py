"""Provider metadata that Airflow reads through the ``apache_airflow_provider`` entry point.

Kept free of imports beyond the package version: Airflow calls it while discovering providers
in every process it starts.
"""

from __future__ import annotations

from typing import Any

from airflow_gpu import __version__


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-gpu",
        "name": "GPU",
        "description": (
            "GPU and accelerator workloads as first-class Airflow tasks: one accelerator spec "
            "for Kubernetes and AWS Batch, CUDA image selection, spot handling and GPU profiling."
        ),
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "GPU accelerators",
                "external-doc-url": "https://docs.nvidia.com/datacenter/cloud-native/",
                "tags": ["software"],
            }
        ],
        "operators": [{"integration-name": "GPU accelerators", "python-modules": ["airflow_gpu.operators.kubernetes"]}],
        "hooks": [{"integration-name": "GPU accelerators", "python-modules": ["airflow_gpu.hooks.kubernetes"]}],
    }
