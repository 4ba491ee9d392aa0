"""The comparison's worked example in Metaflow (not run here: Metaflow is not installed).

Written from Metaflow's documentation: ``@kubernetes`` parameters
(https://docs.metaflow.org/api/step-decorators/kubernetes), ``@retry`` and
``current.spot_termination_notice``
(https://docs.metaflow.org/scaling/remote-tasks/spot-instances).
``@batch(queue=..., gpu=1, image=...)`` is the AWS Batch form of the same step.
tests/docs/test_comparison.py only checks that it is valid Python and uses these names.
"""

import subprocess

from metaflow import FlowSpec, current, kubernetes, retry, step


class FineTuneFlow(FlowSpec):
    @retry(times=3)  # any failure: a reclaim and a bug alike
    @kubernetes(
        image="pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
        gpu=1,
        cpu=8,
        memory=65536,
        shared_memory=8192,
        node_selector={
            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
            "karpenter.sh/capacity-type": "spot",
        },
        tolerations=[
            {
                "key": "karpenter.sh/capacity-type",
                "operator": "Equal",
                "value": "spot",
                "effect": "NoSchedule",
            },
        ],
    )
    @step
    def start(self):
        checkpoints = f"/checkpoints/{current.run_id}"
        command = ["python", "finetune.py", "--checkpoint-dir", checkpoints]
        # The file Metaflow writes when the instance is about to be reclaimed.
        command += ["--stop-file", current.spot_termination_notice]
        subprocess.run(command, check=True)
        self.next(self.end)

    @step
    def end(self):
        pass


if __name__ == "__main__":
    FineTuneFlow()
