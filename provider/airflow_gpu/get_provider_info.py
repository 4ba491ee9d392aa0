"""Provider metadata that Airflow reads through the ``apache_airflow_provider`` entry point.

Kept free of imports beyond the package version: Airflow calls it while discovering providers
in every process it starts. The shape is the official providers' (``integrations``, then
``operators``, ``hooks`` and ``triggers`` by integration); ``tests/test_package.py`` checks that
every module listed here imports and that every operator, hook and trigger module is listed.
The report plugin is listed here and also has an ``airflow.plugins`` entry point, because Airflow
reads a provider's ``plugins`` only with ``[core] lazy_discover_providers = False``.
"""

from __future__ import annotations

from typing import Any

from airflow_gpu import __version__

KUBERNETES = "GPU on Kubernetes"
AWS_BATCH = "GPU on AWS Batch"
ACCELERATE = "GPU training with Hugging Face Accelerate"


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-gpu",
        "name": "GPU",
        "description": (
            "GPU and accelerator workloads as first-class Airflow tasks: one accelerator spec, checked "
            "when the DAG is parsed, runs on Kubernetes or AWS Batch, with CUDA image selection and "
            "spot preemption handled (resubmission, then on-demand fallback)."
        ),
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": KUBERNETES,
                "external-doc-url": "https://kubernetes.io/docs/tasks/manage-gpus/scheduling-gpus/",
                "tags": ["software"],
            },
            {
                "integration-name": AWS_BATCH,
                "external-doc-url": "https://aws.amazon.com/batch/",
                "tags": ["aws"],
            },
            {
                "integration-name": ACCELERATE,
                "external-doc-url": "https://huggingface.co/docs/accelerate/basic_tutorials/launch",
                "tags": ["software"],
            },
        ],
        "operators": [
            {"integration-name": KUBERNETES, "python-modules": ["airflow_gpu.operators.kubernetes"]},
            {
                "integration-name": AWS_BATCH,
                "python-modules": ["airflow_gpu.operators.batch", "airflow_gpu.operators.accelerate_batch"],
            },
            {"integration-name": ACCELERATE, "python-modules": ["airflow_gpu.operators.accelerate"]},
        ],
        "hooks": [
            {"integration-name": KUBERNETES, "python-modules": ["airflow_gpu.hooks.kubernetes"]},
            {"integration-name": AWS_BATCH, "python-modules": ["airflow_gpu.hooks.batch"]},
        ],
        "triggers": [
            {
                "integration-name": KUBERNETES,
                "python-modules": ["airflow_gpu.triggers.kubernetes", "airflow_gpu.triggers.training_job"],
            },
            {"integration-name": AWS_BATCH, "python-modules": ["airflow_gpu.triggers.batch"]},
        ],
        "extra-links": ["airflow_gpu.links.profile.GPUProfileLink"],
        "plugins": [{"name": "airflow_gpu", "plugin-class": "airflow_gpu.plugins.plugin.GPUProfilePlugin"}],
    }
