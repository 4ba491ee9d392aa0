"""``Accelerator``: what a task asks for, checked against the catalog when it is built.

A DAG file builds its specs at parse time, so every check lives here: a typo in a GPU name or a
MIG profile that does not exist fails when the scheduler parses the DAG, with a message that names
the field, the bad value and what is accepted, not when a pod sits Pending on a GPU node.

``memory_gb`` and ``form_factor`` narrow the catalog type to some of its variants. Left out, the
spec means "any variant" (``A100`` is an A100 of 40 or 80 GB), which the Kubernetes translation
turns into node affinity on every matching product. When the other fields leave one memory size
possible (``H100-NVL``, ``H100`` with MIG ``3g.40gb``, any single-variant type), it is filled in,
so that equal requests compare equal.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from airflow_gpu.accelerators import catalog
from airflow_gpu.accelerators.catalog import AcceleratorType, MigProfile, Variant
from airflow_gpu.accelerators.errors import AcceleratorSpecError

_MEMORY_TOKEN = re.compile(r"^(?P<gb>\d+)(gb|g|gib)?$")
_MIG_SUFFIX = re.compile(r"[-_ ]?mig[-_ ]?(?P<profile>[^-_: ]+)$", re.IGNORECASE)
_MIG_PROFILE = re.compile(r"^(?:mig[-_ ]?)?(?P<slices>\d+)g\.(?P<memory>\d+)gb$", re.IGNORECASE)


def _suggest(name: str) -> list[str]:
    """Canonical names whose name or alias is closest to ``name``."""
    close = difflib.get_close_matches(catalog._alias_key(name), catalog.aliases(), n=6, cutoff=0.5)
    return list(dict.fromkeys(catalog.get(alias).name for alias in close))[:3]


def _find_type(name: str) -> AcceleratorType:
    entry = catalog.lookup(name)
    if entry is None:
        suggestions = _suggest(name)
        problem = "unknown accelerator"
        if suggestions:
            problem += f"; did you mean {' or '.join(repr(s) for s in suggestions)}?"
        raise AcceleratorSpecError("type", name, problem, catalog.names())
    return entry


def _normalize_form_factor(entry: AcceleratorType, value: str) -> str:
    form_factor = catalog.FORM_FACTOR_ALIASES.get(value.strip().lower())
    if form_factor is None or form_factor not in entry.form_factors:
        raise AcceleratorSpecError("form_factor", value, f"{entry.name} has no such form factor", entry.form_factors)
    return form_factor


def _normalize_mig(value: str) -> str:
    match = _MIG_PROFILE.match(value.strip())
    if match is None:
        raise AcceleratorSpecError("mig", value, "not a MIG profile name", "names like '3g.40gb' or 'mig-1g.10gb'")
    return f"{int(match['slices'])}g.{int(match['memory'])}gb"


def _variant_names(entry: AcceleratorType, variants: tuple[Variant, ...] | list[Variant]) -> list[str]:
    return [f"{entry.name} {v.label}" for v in variants]


def _check_variants(entry: AcceleratorType, memory_gb: int | None, form_factor: str | None) -> list[Variant]:
    if memory_gb is not None and memory_gb not in entry.memory_variants:
        raise AcceleratorSpecError(
            "memory_gb",
            memory_gb,
            f"{entry.name} has no {memory_gb} GB variant",
            [f"{m} GB" for m in entry.memory_variants],
        )
    matching = [
        v
        for v in entry.variants
        if (memory_gb is None or v.memory_gb == memory_gb) and (form_factor is None or v.form_factor == form_factor)
    ]
    if not matching:
        raise AcceleratorSpecError(
            "form_factor",
            form_factor,
            f"{entry.name} {form_factor} does not come with {memory_gb} GB",
            _variant_names(entry, entry.variants),
        )
    return matching


def _check_mig(entry: AcceleratorType, variants: list[Variant], profile_name: str, count: int) -> list[Variant]:
    if not entry.supports_mig:
        mig_types = [e.name for e in catalog.CATALOG if e.supports_mig]
        raise AcceleratorSpecError("mig", profile_name, f"{entry.name} does not support MIG", mig_types)
    with_profile = [v for v in variants if v.mig_profile(profile_name) is not None]
    if not with_profile:
        valid = [
            f"{entry.name}-{v.memory_gb}GB: {', '.join(p.name for p in v.mig_profiles)}"
            for v in dict((v.memory_gb, v) for v in variants).values()
            if v.mig_profiles
        ]
        raise AcceleratorSpecError(
            "mig", profile_name, f"no such MIG profile on {entry.name} {_memory_text(variants)}", valid
        )
    profile: MigProfile | None = with_profile[0].mig_profile(profile_name)
    assert profile is not None
    if count > profile.max_instances:
        memory = with_profile[0].memory_gb
        if profile.compute_slices == 7:
            problem = (
                f"MIG profile {profile.name} is the whole GPU, so {count} of them are {count} whole GPUs; "
                f"ask for '{entry.name}-{memory}GB:{count}' without MIG"
            )
        else:
            smaller = [p.name for p in with_profile[0].mig_profiles if p.max_instances >= count]
            problem = (
                f"at most {profile.max_instances} instances of MIG {profile.name} fit on one "
                f"{entry.name}-{memory}GB, asked for {count}; ask for whole GPUs "
                f"('{entry.name}-{memory}GB:{-(-count * profile.compute_slices // 7)}')"
                + (f" or a smaller profile ({', '.join(smaller)})" if smaller else "")
            )
        raise AcceleratorSpecError("count", count, problem)
    return with_profile


def _memory_text(variants: list[Variant]) -> str:
    sizes = sorted({v.memory_gb for v in variants})
    return " or ".join(f"{m} GB" for m in sizes)


def _check_count(entry: AcceleratorType, count: int) -> None:
    if count < 1:
        raise AcceleratorSpecError("count", count, "must be at least 1")
    if count > entry.max_per_node:
        raise AcceleratorSpecError(
            "count",
            count,
            f"one node offers at most {entry.max_per_node} {entry.name}; "
            "for more, run on several nodes (multi-node training)",
            [f"1..{entry.max_per_node}"],
        )
    if entry.allowed_counts and count not in entry.allowed_counts:
        raise AcceleratorSpecError(
            "count",
            count,
            f"{entry.name} nodes are requested whole",
            [str(c) for c in entry.allowed_counts],
        )


def _as_int(field: str, value: Any) -> int:
    """Whole numbers only: ``8``, ``"8"`` or ``8.0``; never ``True`` or ``1.5``."""
    if isinstance(value, bool):
        raise AcceleratorSpecError(field, value, "must be a whole number")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
        return int(value)
    raise AcceleratorSpecError(field, value, "must be a whole number")


def parse_shorthand(text: str) -> dict[str, Any]:
    """Split ``"A100-80GB-SXM-MIG-3g.40gb:2"`` into the constructor's keywords.

    Only the syntax is checked here; the values are checked by the model, so that the
    constructor and the parser give the same errors.
    """
    if not isinstance(text, str) or not text.strip():
        raise AcceleratorSpecError("spec", text, "empty accelerator spec", ["'H100'", "'H100:8'", "'A100-40GB:4'"])
    name, sep, count_text = text.strip().partition(":")
    fields: dict[str, Any] = {}
    if sep:
        count_text = count_text.strip()
        if not re.fullmatch(r"[+-]?\d+", count_text):
            raise AcceleratorSpecError("count", count_text, "not a whole number", ["'H100:8'"])
        fields["count"] = int(count_text)
    mig = _MIG_SUFFIX.search(name)
    if mig is not None:
        fields["mig"] = mig["profile"]
        name = name[: mig.start()]
    tokens = [t for t in re.split(r"[-_\s]+", name.strip()) if t]
    if not tokens:
        raise AcceleratorSpecError("type", text, "no accelerator name", catalog.names())
    # The longest run of leading tokens that names a type wins: "tpu-v5p" before "tpu".
    for end in range(len(tokens), 0, -1):
        entry = catalog.lookup("-".join(tokens[:end]))
        if entry is not None:
            break
    else:
        return {"type": name.strip(), **fields}  # the model reports the unknown type
    fields["type"] = entry.name
    for token in tokens[end:]:
        memory = _MEMORY_TOKEN.match(token.lower())
        if memory is not None and "memory_gb" not in fields:
            fields["memory_gb"] = int(memory["gb"])
        elif token.lower() in catalog.FORM_FACTOR_ALIASES and "form_factor" not in fields:
            fields["form_factor"] = token
        else:
            raise AcceleratorSpecError(
                "spec",
                text,
                f"cannot read {token!r} after {entry.name}",
                ["a memory size like '80GB'", *entry.form_factors, "'MIG-3g.40gb'", "':COUNT'"],
            )
    return fields


class Accelerator(BaseModel):
    """An accelerator request: which device, how many, and optionally which variant or MIG slice.

    Build it from keywords (``Accelerator(type="H100", count=8)``) or from the shorthand people
    type (``Accelerator.parse("H100:8")``); ``str()`` gives the canonical shorthand back.
    With ``mig`` set, ``count`` is the number of MIG instances of that profile.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=False)

    type: str
    count: int = 1
    memory_gb: int | None = None
    form_factor: str | None = None
    mig: str | None = None

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as error:
            raise _unwrap(error) from None

    @model_validator(mode="before")
    @classmethod
    def _resolve(cls, data: Any) -> Any:
        if isinstance(data, str):
            data = parse_shorthand(data)
        if not isinstance(data, dict) or not isinstance(data.get("type"), str):
            return data  # pydantic reports the missing or mistyped field
        entry = _find_type(data["type"])
        count = _as_int("count", data.get("count", 1))
        memory_gb = data.get("memory_gb")
        memory_gb = None if memory_gb is None else _as_int("memory_gb", memory_gb)
        form_factor = data.get("form_factor")
        mig = data.get("mig")
        if isinstance(form_factor, str):
            form_factor = _normalize_form_factor(entry, form_factor)
        variants = _check_variants(entry, memory_gb, form_factor)
        if isinstance(mig, str):
            mig = _normalize_mig(mig)
            variants = _check_mig(entry, variants, mig, count)
            if count < 1:
                raise AcceleratorSpecError("count", count, "must be at least 1")
        else:
            _check_count(entry, count)
        sizes = {v.memory_gb for v in variants}
        if memory_gb is None and len(sizes) == 1:
            memory_gb = sizes.pop()
        return {
            **data,
            "type": entry.name,
            "count": count,
            "memory_gb": memory_gb,
            "form_factor": form_factor,
            "mig": mig,
        }

    @classmethod
    def parse(cls, text: str | Accelerator) -> Accelerator:
        """Build a spec from shorthand such as ``"H100:8"`` or ``"a100-40gb:4"``; specs pass through."""
        if isinstance(text, Accelerator):
            return text
        if not isinstance(text, str):
            raise AcceleratorSpecError("spec", text, f"expected a string or an Accelerator, got {type(text).__name__}")
        return cls(**parse_shorthand(text))

    # Derived facts, read from the catalog so that there is one source of truth.

    @property
    def catalog_entry(self) -> AcceleratorType:
        return catalog.get(self.type)

    @property
    def variants(self) -> tuple[Variant, ...]:
        """The catalog variants this spec may run on."""
        return tuple(
            v
            for v in self.catalog_entry.variants
            if (self.memory_gb is None or v.memory_gb == self.memory_gb)
            and (self.form_factor is None or v.form_factor == self.form_factor)
            and (self.mig is None or v.mig_profile(self.mig) is not None)
        )

    @property
    def vendor(self) -> str:
        return self.catalog_entry.vendor

    @property
    def architecture(self) -> str:
        return self.catalog_entry.architecture

    @property
    def compute_capability(self) -> str | None:
        return self.catalog_entry.compute_capability

    @property
    def min_cuda(self) -> str | None:
        return self.catalog_entry.min_cuda

    @property
    def mig_profile(self) -> MigProfile | None:
        if self.mig is None:
            return None
        return self.variants[0].mig_profile(self.mig)

    @property
    def device_memory_gb(self) -> int:
        """Memory one device (or MIG slice) is guaranteed to have: the smallest variant's."""
        if self.mig_profile is not None:
            return self.mig_profile.memory_gb
        return min(v.memory_gb for v in self.variants)

    @property
    def devices(self) -> int:
        """Whole devices the request occupies (a MIG request occupies part of one)."""
        return 0 if self.mig is not None else self.count

    def __str__(self) -> str:
        name = self.type
        if self.memory_gb is not None and len(self.catalog_entry.memory_variants) > 1:
            name += f"-{self.memory_gb}GB"
        if self.form_factor is not None:
            name += f"-{self.form_factor}"
        if self.mig is not None:
            name += f"-MIG-{self.mig}"
        return name if self.count == 1 else f"{name}:{self.count}"

    def __repr__(self) -> str:
        return f"Accelerator({str(self)!r})"


def _unwrap(error: ValidationError) -> ValueError:
    """Turn pydantic's report into one message a DAG author can act on."""
    details = error.errors()
    for detail in details:
        cause = (detail.get("ctx") or {}).get("error")
        if isinstance(cause, AcceleratorSpecError):
            return cause
    first = details[0]
    where = ".".join(str(part) for part in first["loc"]) or "spec"
    if first["type"] == "extra_forbidden":
        return AcceleratorSpecError(
            "spec", where, "unknown field", ["type", "count", "memory_gb", "form_factor", "mig"]
        )
    if first["type"] == "missing":
        return AcceleratorSpecError(where, None, "is required", ["type='H100'", "Accelerator.parse('H100:8')"])
    return AcceleratorSpecError(where, first.get("input"), first["msg"])


def parse_candidates(accelerator: str | Accelerator | Sequence[str | Accelerator]) -> tuple[Accelerator, ...]:
    """One spec or several in preference order (SkyPilot's ``any_of``/``ordered``), each parsed."""
    items = [accelerator] if isinstance(accelerator, str | Accelerator) else list(accelerator)
    if not items:
        raise AcceleratorSpecError(
            "spec", accelerator, "no accelerator given", ["'H100:8'", "['H100:8', 'A100-80GB:8']"]
        )
    return tuple(Accelerator.parse(item) for item in items)
