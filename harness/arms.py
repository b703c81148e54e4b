"""Arm specs: how one case is run (`ort`, `engine`, `plugin:...`).

Grammar (one place): ``ort[:OPTS]`` | ``engine[:OPTS]`` | ``engine@LIB[:OPTS]`` |
``plugin:PATH_OR_MODULE[:OPTS]``, where OPTS is ``K=V[,K=V...]``. ``name=ALIAS``
names the arm (its key in results and its registration name); every other
option is handed to the EP through ``add_provider_for_devices``.

Resolving a spec to a library path happens here, in the parent process, and
never loads the library: loading happens in the worker, where a crash is
contained.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from epbench import engine
from epbench.core.errors import ArmError, scratch_remedy
from epbench.engine import EP_OPTIONS

CONTROL_KEY = "ort"
KINDS = ("ort", "engine", "plugin")


@dataclass(frozen=True)
class ArmSpec:
    """One arm as the user wrote it, parsed. Immutable; validated when built."""

    spec: str  # exactly as written on the command line
    kind: str  # ort | engine | plugin
    target: str | None = None  # plugin: path or module; engine@LIB: the library
    options: tuple[tuple[str, str], ...] = field(default_factory=tuple)  # EP options
    name: str | None = None  # from name=ALIAS

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ArmError(f"unknown arm kind {self.kind!r}: use one of {', '.join(KINDS)}")

    @property
    def key(self) -> str:
        """The arm's key in results and summaries: its name, else a short label.

        A library given by path is labelled by its stem, so a report shows `ggml_ep`
        rather than `plugin:/opt/x/lib/libonnxruntime_ggml_ep.so`; any other spec is its
        own key. The whole spec stays in the results file's arm record.
        """
        if self.name:
            return self.name
        if self.target is not None and _is_library_path(self.target):
            prefix = "" if self.kind == "plugin" else f"{self.kind}@"
            options = ",".join(f"{k}={v}" for k, v in self.options)
            return prefix + library_label(self.target) + (f":{options}" if options else "")
        return self.spec

    @property
    def registration_name(self) -> str | None:
        """The name the library is registered under (None for the ORT CPU EP).

        For the engine this is also its EP name, so it must be a plain identifier.
        """
        if self.kind == "ort":
            return None
        return re.sub(r"[^A-Za-z0-9_]", "_", self.key)

    @property
    def ep_options(self) -> dict[str, str]:
        return dict(self.options)

    def to_dict(self) -> dict[str, object]:
        """Every field, for the worker request (the spec string alone may lack a name)."""
        return {"spec": self.spec, "kind": self.kind, "target": self.target,
                "options": [list(kv) for kv in self.options], "name": self.name}

    @classmethod
    def from_dict(cls, data: dict) -> ArmSpec:
        return cls(spec=data["spec"], kind=data["kind"], target=data["target"],
                   options=tuple((k, v) for k, v in data["options"]), name=data["name"])


# Library file suffixes by platform; a plugin target with one of these, or with a path
# separator, is a file, not a module name.
_LIBRARY_SUFFIXES = (".so", ".dylib", ".dll")


def _is_library_path(target: str) -> bool:
    name = Path(target).name
    return "/" in target or os.sep in target or name.endswith(_LIBRARY_SUFFIXES) or ".so." in name


def library_label(path: str) -> str:
    """A short, readable label for a library file: `libonnxruntime_ggml_ep.so` -> `ggml_ep`.

    Drops the folder, the version and platform suffixes, and the `lib` and `onnxruntime_`
    prefixes most plugin EPs carry; falls back to the file name when nothing is left.
    """
    name = Path(path).name
    stem = name.split(".so", 1)[0] if ".so" in name else Path(name).stem
    for prefix in ("lib", "onnxruntime_"):
        if stem.startswith(prefix) and len(stem) > len(prefix):
            stem = stem[len(prefix):]
    stem = re.sub(r"[^A-Za-z0-9_.\-]", "_", stem)
    return stem or name


def _parse_options(text: str, spec: str) -> tuple[tuple[tuple[str, str], ...], str | None]:
    options: list[tuple[str, str]] = []
    name = None
    for item in text.split(","):
        if "=" not in item or not item.split("=", 1)[0]:
            raise ArmError(
                f"arm {spec!r}: option {item!r} is not KEY=VALUE; "
                "write options as e.g. engine:partition=per_node,name=pernode"
            )
        key, value = item.split("=", 1)
        if key == "name":
            if not re.fullmatch(r"[A-Za-z0-9_.\-]+", value):
                raise ArmError(
                    f"arm {spec!r}: name={value!r} must be letters, digits, '_', '-' or '.'"
                )
            name = value
        else:
            options.append((key, value))
    return tuple(options), name


def parse_arm(spec: str) -> ArmSpec:
    """Parse one ``--arm`` value. Raises ArmError with the grammar on a bad spec."""
    text = spec.strip()
    if not text:
        raise ArmError("empty --arm: use ort, engine, engine@LIB or plugin:PATH_OR_MODULE")
    head, opts = text, ""
    if text.startswith("plugin:"):
        rest = text[len("plugin:") :]
        # A trailing ":K=V,..." holds options; a path may itself contain ':' rarely,
        # so only a last segment made of K=V items counts as options.
        if ":" in rest:
            maybe_target, maybe_opts = rest.rsplit(":", 1)
            if maybe_opts and all("=" in item for item in maybe_opts.split(",")):
                rest, opts = maybe_target, maybe_opts
        if not rest:
            raise ArmError(f"arm {spec!r}: plugin needs a library path or a module name")
        options, name = _parse_options(opts, spec) if opts else ((), None)
        return ArmSpec(spec=text, kind="plugin", target=rest, options=options, name=name)
    if ":" in text:
        head, opts = text.split(":", 1)
    options, name = _parse_options(opts, spec) if opts else ((), None)
    if head == "ort":
        if options:
            raise ArmError(f"arm {spec!r}: the ort arm takes only name=ALIAS")
        return ArmSpec(spec=text, kind="ort", name=name)
    if head == "engine":
        return ArmSpec(spec=text, kind="engine", options=options, name=name)
    if head.startswith("engine@"):
        lib = head[len("engine@") :]
        if not lib:
            raise ArmError(f"arm {spec!r}: engine@LIB needs a library path")
        return ArmSpec(spec=text, kind="engine", target=lib, options=options, name=name)
    raise ArmError(
        f"unknown arm {spec!r}: use ort, engine[:K=V,...], engine@LIB or "
        "plugin:PATH_OR_MODULE[:K=V,...]"
    )


def _unique_labels(arms: list[ArmSpec]) -> list[ArmSpec]:
    """Arms whose short labels collide (two libraries with one stem) get `_2`, `_3`, ...

    Only labels made from a library path are changed; a key the user chose, or one spec
    written twice, is left for `with_control` to refuse.
    """
    fixed = {a.key for a in arms if a.name is not None or a.key == a.spec}
    holder: dict[str, str] = {}  # key -> the spec that holds it
    out = []
    for arm in arms:
        derived = arm.name is None and arm.key != arm.spec
        if derived and (arm.key in fixed or holder.get(arm.key, arm.spec) != arm.spec):
            n = 2
            while f"{arm.key}_{n}" in fixed or f"{arm.key}_{n}" in holder:
                n += 1
            arm = replace(arm, name=f"{arm.key}_{n}")
        holder.setdefault(arm.key, arm.spec)
        out.append(arm)
    return out


def find_arm(arms: list[ArmSpec], wanted: str) -> ArmSpec | None:
    """The arm a user named, by its key or by the spec as they wrote it."""
    return next((a for a in arms if wanted in (a.key, a.spec)), None)


def with_control(arms: list[ArmSpec]) -> list[ArmSpec]:
    """The arms in order, with the `ort` control first if it was not named; keys unique."""
    arms = _unique_labels(arms)
    keys = [a.key for a in arms]
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    if dupes:
        raise ArmError(
            f"arm key {dupes[0]!r} is used twice: give one of them name=ALIAS "
            f"(e.g. --arm '{dupes[0]}:name=other')"
        )
    registered: dict[str, str] = {}
    for arm in arms:
        name = arm.registration_name
        if name is not None and registered.setdefault(name, arm.spec) != arm.spec:
            raise ArmError(
                f"arms {registered[name]!r} and {arm.spec!r} would both register as "
                f"{name!r}: give one of them another name=ALIAS"
            )
        if arm.kind == "engine":

            unknown = sorted(k for k, _ in arm.options if k not in EP_OPTIONS)
            if unknown:
                raise ArmError(f"arm {arm.spec!r}: the engine has no option {unknown[0]!r}; "
                               f"it takes {', '.join(EP_OPTIONS)} (and name=ALIAS)")
    if CONTROL_KEY in keys:
        control = next(a for a in arms if a.key == CONTROL_KEY)
        if control.kind != "ort":
            raise ArmError(f"the key {CONTROL_KEY!r} is reserved for ORT's CPU EP control arm")
        return arms
    return [ArmSpec(spec="ort", kind="ort"), *arms]


def resolve_library(arm: ArmSpec) -> str | None:
    """The absolute path of the arm's shared library (None for `ort`).

    Does not load it. Raises ArmError naming the path or module when it cannot be found.
    """
    if arm.kind == "ort":
        return None
    if arm.kind == "engine":
        if arm.target:
            return _existing_file(arm.target, arm.spec)

        return engine.library_path()
    target = arm.target or ""
    looks_like_path = os.sep in target or target.endswith((".so", ".dylib", ".dll"))
    if looks_like_path:
        return _existing_file(target, arm.spec)
    if importlib.util.find_spec(target.split(".")[0]) is None:
        raise ArmError(
            f"arm {arm.spec!r}: {target!r} is neither a file nor an installed module; "
            "give a path to the .so or `pip install` the package"
        )
    try:
        module = importlib.import_module(target)
    except Exception as exc:  # a broken package is the user's to fix, not a traceback
        raise ArmError(
            f"arm {arm.spec!r}: importing {target!r} failed ({type(exc).__name__}: {exc}); "
            "check the module name or pass the library path"
        ) from None
    get_path = getattr(module, "get_library_path", None)
    if not callable(get_path):
        raise ArmError(
            f"arm {arm.spec!r}: module {target!r} has no get_library_path(); "
            "pass the library path instead: plugin:/path/to/libmyep.so"
        )
    try:
        path = str(get_path())
    except Exception as exc:  # the module's own failure, reported as the user's problem
        raise ArmError(f"arm {arm.spec!r}: {target}.get_library_path() failed: {exc}") from None
    return _existing_file(path, arm.spec)


def _existing_file(path: str, spec: str) -> str:
    p = Path(path).expanduser()
    if not p.is_file():
        raise ArmError(f"arm {spec!r}: library {str(p)!r} does not exist; check the path")
    return str(p.resolve())


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


TWIN_SUFFIX = "_twin"


def twin_arm(arm: ArmSpec) -> ArmSpec:
    """The A/A twin of ``arm``: the same arm under the key ``<key>_twin``.

    Its registration name follows from the key, so ORT sees a second, separately
    registered EP; the runner gives it its own copy of the library (own path), so the
    loader maps it a second time instead of handing back the first mapping, unless every
    arm loads one file (shares_one_library).
    """
    return replace(arm, name=f"{arm.key}{TWIN_SUFFIX}")


def library_arms(arms: list[ArmSpec]) -> list[ArmSpec]:
    """The arms that load a library (every arm but `ort` ones), in order."""
    return [a for a in with_control(list(arms)) if a.kind != "ort"]


def compares_arms(arms: list[ArmSpec]) -> bool:
    """Whether a run compares arms with each other: two or more arms with a library."""
    return len(library_arms(arms)) >= 2


def default_twin(arms: list[ArmSpec]) -> str | None:
    """The arm `run` twins when not told: the first arm with a library (not `ort`), once
    two or more such arms are compared (a same-run comparison then has its own A/A noise;
    without it `compare` falls back to a 4 % threshold and a 2 % slowdown between two arms
    is never flagged)."""
    # An `ort` arm has no library to copy: a twin of it would measure no copy's bias.
    others = library_arms(arms)
    return others[0].key if compares_arms(arms) else None


def shares_one_library(arms: list[ArmSpec], libraries: Mapping[str, str | None]) -> bool:
    """Whether two or more arms with a library all load one file (e.g. `engine` and
    `engine:partition=per_node`): then no comparison of the run sets two libraries'
    copies side by side, and the twin registers that file again instead of a copy."""
    paths = {p and os.path.realpath(p) for p in (libraries.get(a.key) for a in library_arms(arms))}
    return compares_arms(arms) and len(paths) == 1 and None not in paths


# What to do without the twin: --no-aa-twin (run, compare-commits and validate).
WITHOUT_TWIN = "run without the A/A twin (--no-aa-twin)"


def copy_library(path: str | None, folder: Path, prefix: str = "twin-",
                 purpose: str = "the A/A twin",
                 otherwise: str | None = WITHOUT_TWIN) -> str | None:
    """A private copy of a library (None for ORT's CPU EP): its own file, so the loader
    maps it apart from the original (for the A/A twin, or for validate's stand-ins of a
    PR's build)."""
    if path is None:
        return None
    target = folder / f"{prefix}{Path(path).name}"
    or_else = f", or {otherwise}" if otherwise else ""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        noexec = mounted_noexec(folder)
        if not noexec:
            shutil.copy2(path, target)
    except OSError as exc:
        remedy = scratch_remedy(exc, "point TMPDIR at a folder you can write to" + or_else)
        raise ArmError(f"cannot copy {path} for {purpose} ({exc.strerror or exc}); "
                       f"{remedy}") from None
    if noexec:
        # The folder is a temporary one, gone when this is read; TMPDIR is what to change.
        raise ArmError(f"cannot copy {path} for {purpose}: {tempfile.gettempdir()} is on a file "
                       "system mounted noexec, so a library copied there cannot be loaded; "
                       f"point TMPDIR at a folder on one mounted with exec{or_else}")
    return str(target)


def mounted_noexec(folder: Path) -> bool:
    """Whether ``folder``'s file system is mounted noexec, where a copied library fails
    to map (some CI containers' /tmp) with a loader error that does not say why. False
    where the platform cannot tell."""
    flag = getattr(os, "ST_NOEXEC", 0)
    if not flag or not hasattr(os, "statvfs"):
        return False
    try:
        return bool(os.statvfs(folder).f_flag & flag)
    except OSError:
        return False  # a file system that cannot say: the copy and the load will tell
