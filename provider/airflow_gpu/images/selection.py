"""Pick the image for an accelerator, or check the one the user picked.

Operators call ``resolve_image(image, accelerator)`` when they are constructed, so at DAG parse
time: ``image="auto"`` selects the newest catalog image that runs on the accelerator (and the node
driver, when known); any other reference is validated and refused with a compatible replacement
when it cannot run. An image whose tag says nothing about its CUDA is accepted with a warning:
private images are common, and refusing them would be worse than trusting them.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

from airflow_gpu.accelerators.spec import Accelerator
from airflow_gpu.images import catalog
from airflow_gpu.images.compatibility import gpu_requirement, problems, required_platform
from airflow_gpu.images.cuda import (
    COMPATIBILITY_MODES,
    Compatibility,
    Version,
    driver_limit_text,
    min_driver,
    parse_version,
    show,
)
from airflow_gpu.images.tags import ImageInfo, parse_image

log = logging.getLogger(__name__)

AUTO = "auto"
FRAMEWORKS: tuple[str, ...] = ("pytorch", "none")
FLAVORS: tuple[str, ...] = ("runtime", "devel", "training", "inference")
#: The family chosen when the caller names no registry.
DEFAULT_REGISTRY = {"cuda": "pytorch", "rocm": "rocm", "neuron": "neuron"}
#: Registry names users may pass, mapped to catalog families.
REGISTRIES: dict[str, str] = {
    "dockerhub": "pytorch",
    "pytorch": "pytorch",
    "ngc": "ngc",
    "nvidia-cuda": "nvidia-cuda",
    "aws-dlc": "aws-dlc",
    "neuron": "neuron",
    "rocm": "rocm",
}
_FAMILY_PLATFORM = {
    "pytorch": "cuda",
    "ngc": "cuda",
    "nvidia-cuda": "cuda",
    "aws-dlc": "cuda",
    "neuron": "neuron",
    "rocm": "rocm",
}


class ImageError(ValueError):
    """An image request that cannot be met, or an image that cannot run; says what would."""


@dataclass(frozen=True)
class Candidate:
    """One catalog image of the family a selection looked in, and what kept it out (nothing: it
    runs and matches what was asked; the choice is the newest such one)."""

    image: ImageInfo
    problems: tuple[str, ...]
    chosen: bool = False


@dataclass(frozen=True)
class ImageChoice:
    """The selected image and why it was chosen."""

    reference: str
    image: ImageInfo
    reasons: tuple[str, ...]
    #: Every image of the family and flavor looked in, newest first, each with what kept it out.
    candidates: tuple[Candidate, ...] = ()

    def __str__(self) -> str:
        return self.reference


def _matches(version: Version | None, wanted: str | None) -> bool:
    """``"2.8"`` matches 2.8.0 and 2.8.1; ``"12"`` matches every 12.x."""
    if wanted is None:
        return True
    if version is None:
        return False
    prefix = parse_version(wanted)
    return version[: len(prefix)] == prefix


def _check_choice(name: str, value: str | None, accepted: tuple[str, ...] | list[str]) -> None:
    if value is not None and value not in accepted:
        raise ImageError(f"{name} {value!r} is not one of: {', '.join(accepted)}")


def _family(accelerator: Accelerator, registry: str | None, framework: str) -> str:
    platform = required_platform(accelerator)
    if platform == "tpu":
        raise ImageError(
            f"the image catalog has no TPU images; {accelerator.type} needs a JAX or PyTorch/XLA image: "
            "pass image='<reference>' instead of 'auto'"
        )
    if framework == "none":
        if platform != "cuda" or registry not in (None, "nvidia-cuda"):
            raise ImageError(
                "framework='none' (a bare CUDA base image) exists for NVIDIA GPUs from registry 'nvidia-cuda' only"
            )
        return "nvidia-cuda"
    if registry is None:
        return DEFAULT_REGISTRY[platform]
    _check_choice("registry", registry, list(REGISTRIES))
    family = REGISTRIES[registry]
    if _FAMILY_PLATFORM[family] != platform or family == "nvidia-cuda":
        fitting = [
            name for name, fam in REGISTRIES.items() if _FAMILY_PLATFORM[fam] == platform and fam != "nvidia-cuda"
        ]
        raise ImageError(
            f"registry {registry!r} has no {framework} images for {accelerator.type}; use one of: {', '.join(fitting)}"
        )
    return family


def _effective_flavor(spec: Accelerator, family: str, flavor: str | None) -> str | None:
    """Neuron images come as training and inference: Trainium trains, Inferentia serves."""
    if family == "neuron" and flavor not in ("training", "inference"):
        return "training" if spec.type.startswith("Trainium") else "inference"
    return flavor


@functools.cache
def _family_flavors(family: str) -> frozenset[str | None]:
    return frozenset(i.flavor for i in catalog.images() if i.family == family)


def _flavor_ok(image: ImageInfo, flavor: str | None) -> bool:
    """Families with a runtime/devel (or training/inference) split honour the flavor; others ignore it."""
    return flavor is None or flavor not in _family_flavors(image.family) or image.flavor == flavor


def _newest_first(images: list[ImageInfo]) -> list[ImageInfo]:
    def key(image: ImageInfo) -> tuple[Version, Version, bool]:
        stack = image.cuda or image.rocm or image.neuron_sdk or ()
        return (image.framework_version or (), stack, image.flavor == "training")

    return sorted(images, key=key, reverse=True)


def select_image(
    accelerator: Accelerator | str,
    framework: str = "pytorch",
    framework_version: str | None = None,
    cuda: str | None = None,
    driver_version: str | None = None,
    flavor: str | None = "runtime",
    registry: str | None = None,
    compatibility: Compatibility = "strict",
) -> ImageChoice:
    """The newest catalog image that runs on ``accelerator``, and the reasons for the choice."""
    spec = Accelerator.parse(accelerator)
    _check_choice("framework", framework, FRAMEWORKS)
    _check_choice("flavor", flavor, FLAVORS)
    _check_choice("compatibility", compatibility, COMPATIBILITY_MODES)
    driver = _parse_driver(driver_version)
    family = _family(spec, registry, framework)
    flavor = _effective_flavor(spec, family, flavor)
    in_family = [i for i in catalog.images() if i.family == family and _flavor_ok(i, flavor)]
    found = {i.reference: problems(i, spec, driver, compatibility, driver_version) for i in in_family}
    compatible = [i for i in in_family if not found[i.reference]]
    for image in compatible:
        if not _matches(image.framework_version, framework_version):
            found[image.reference] = [f"{framework} {framework_version} was asked for"]
        elif not _matches(image.cuda, cuda):
            found[image.reference] = [f"CUDA {cuda} was asked for"]
    wanted = [i for i in compatible if not found[i.reference]]
    constraints = [gpu_requirement(spec)]
    if driver is not None:
        constraints.append(driver_limit_text(driver, compatibility, driver_version))
    if not wanted:
        raise ImageError(
            _no_match(spec, family, framework, framework_version, cuda, constraints, compatible, driver, compatibility)
        )
    choice = _newest_first(wanted)[0]
    asked = " ".join(part for part in (framework if framework != "none" else "CUDA base", framework_version) if part)
    reasons = [
        *constraints,
        f"newest {asked} image in the {family} catalog that meets them: {_describe(choice)}",
    ]
    needs = min_driver(choice.cuda, compatibility) if choice.cuda else None
    if needs is not None:
        reasons.append(f"it needs a driver >= {show(needs)} on the nodes (CUDA {show(choice.cuda or ())})")
    candidates = tuple(
        Candidate(i, tuple(found[i.reference]), i.reference == choice.reference) for i in _newest_first(in_family)
    )
    return ImageChoice(choice.reference, choice, tuple(reasons), candidates)


def _describe(image: ImageInfo) -> str:
    version = f"{image.framework} {show(image.framework_version)}, " if image.framework_version else ""
    return f"{version}{image.accelerator_stack}" + (f", {image.flavor}" if image.flavor else "")


def _no_match(
    spec: Accelerator,
    family: str,
    framework: str,
    framework_version: str | None,
    cuda: str | None,
    constraints: list[str],
    compatible: list[ImageInfo],
    driver: Version | None,
    compatibility: Compatibility,
) -> str:
    asked = " ".join(p for p in (framework, framework_version) if p and p != "none") or "CUDA base"
    if cuda:
        asked += f" with CUDA {cuda}"
    message = f"no {asked} image in the {family} catalog runs on {spec}: {'; '.join(constraints)}"
    if compatible:
        newest = _newest_first(compatible)[0]
        return message + f". Newest compatible: {newest.reference} ({_describe(newest)})"
    platform = _FAMILY_PLATFORM[family]
    elsewhere = [
        i
        for i in catalog.images()
        if _FAMILY_PLATFORM.get(i.family) == platform and not problems(i, spec, driver, compatibility)
    ]
    if elsewhere:
        newest = _newest_first(elsewhere)[0]
        registry = next(name for name, fam in REGISTRIES.items() if fam == newest.family)
        return message + f". Newest compatible in another registry: {newest.reference} (registry={registry!r})"
    return message + ". No catalog image is compatible; pass a compatible image reference"


def _parse_driver(driver_version: str | None) -> Version | None:
    if driver_version is None:
        return None
    try:
        return parse_version(driver_version)
    except ValueError:
        raise ImageError(
            f"driver_version {driver_version!r} is not a driver version (e.g. '535', '550.54.14')"
        ) from None


def validate_image(
    image: str,
    accelerator: Accelerator | str,
    driver_version: str | None = None,
    compatibility: Compatibility = "strict",
) -> ImageInfo:
    """Check that ``image`` runs on ``accelerator``; raise ``ImageError`` with a replacement if not."""
    spec = Accelerator.parse(accelerator)
    driver = _parse_driver(driver_version)
    info = parse_image(image)
    if info.platform == "unknown" or (info.platform == "cuda" and info.cuda is None):
        log.warning(
            "Cannot tell which CUDA/ROCm/Neuron version image %r carries; accepting it for %s unchecked.",
            image,
            spec,
        )
        return info
    found = problems(info, spec, driver, compatibility, driver_version)
    if not found:
        return info
    message = f"image {image!r} cannot run on {spec}: {'; '.join(found)}"
    replacement = _replacement(info, spec, driver_version, compatibility)
    if replacement is not None:
        message += f". Compatible replacement: {replacement}"
    raise ImageError(message)


def _replacement(
    info: ImageInfo, spec: Accelerator, driver_version: str | None, compatibility: Compatibility
) -> str | None:
    """The same framework and version if any image of it fits, else the newest that fits."""
    same_family = info.family if _FAMILY_PLATFORM.get(info.family) == required_platform(spec) else None
    version = ".".join(str(p) for p in info.framework_version[:2]) if info.framework_version else None
    attempts = [(same_family, version), (same_family, None), (None, None)]
    framework = "none" if info.family == "nvidia-cuda" and required_platform(spec) == "cuda" else "pytorch"
    for registry, framework_version in attempts:
        try:
            return select_image(
                spec,
                framework=framework,
                framework_version=framework_version,
                driver_version=driver_version,
                flavor=info.flavor if same_family and info.flavor in FLAVORS else "runtime",
                registry=registry,
                compatibility=compatibility,
            ).reference
        except ImageError:
            continue
    return None


@functools.lru_cache(maxsize=1024)
def resolve_image(
    image: str,
    accelerator: Accelerator | str | None,
    driver_version: str | None = None,
    framework: str = "pytorch",
    framework_version: str | None = None,
    flavor: str | None = "runtime",
    compatibility: Compatibility = "strict",
) -> str:
    """What operators call: ``"auto"`` selects, a reference is validated, no accelerator means no CUDA.

    A task without an accelerator is never given a CUDA image: ``"auto"`` then asks for a
    reference, and any reference is accepted as it is.
    """
    if accelerator is None:
        if image == AUTO:
            raise ImageError(
                "image='auto' picks an accelerator image; a task without an accelerator needs an image reference"
            )
        return image
    if image == AUTO:
        return select_image(
            accelerator,
            framework=framework,
            framework_version=framework_version,
            driver_version=driver_version,
            flavor=flavor,
            compatibility=compatibility,
        ).reference
    validate_image(image, accelerator, driver_version, compatibility)
    return image
