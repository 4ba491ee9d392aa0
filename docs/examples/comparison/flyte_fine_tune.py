"""The comparison's worked example in Flyte (not run here: flytekit is not installed).

Written from Flyte's documentation: ``accelerator=`` (flytekit.extras.accelerators; the
Flyte 1.10.6 release notes, https://github.com/flyteorg/flyte/releases/tag/v1.10.6),
``interruptible`` with ``retries`` (docs/comparison.rst cites the page), and ``ImageSpec``,
which builds an image with flytekit on top of the pinned base image.
tests/docs/test_comparison.py only checks that it is valid Python and uses these names.
"""

from flytekit import ImageSpec, Resources, current_context, task, workflow
from flytekit.extras.accelerators import A100

image = ImageSpec(
    base_image="pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
    packages=["flytekit"],
    registry="ghcr.io/my-org",
)


@task(
    container_image=image,
    requests=Resources(cpu="8", mem="64Gi", gpu="1"),
    limits=Resources(mem="64Gi", gpu="1"),
    accelerator=A100.unpartitioned,  # a whole A100 (40GB), not a MIG slice
    interruptible=True,  # spot; the last retry runs on on-demand capacity
    retries=3,
)
def fine_tune(epochs: int) -> float:
    checkpoint = current_context().checkpoint  # restored on a retry
    from finetune import train  # the training code, baked into the image

    return train(epochs=epochs, checkpoint=checkpoint)


@workflow
def fine_tune_wf(epochs: int = 3) -> float:
    return fine_tune(epochs=epochs)
