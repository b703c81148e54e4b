"""Build the bundled engine: fetch ONNX Runtime's C headers once, then compile the C EP.

    python -m epbench.engine.build --inplace    # engine/libepbench_engine.so (`make engine`)
    python -m epbench.engine.build --out DIR    # DIR/libepbench_engine.so, path printed last
    python -m epbench.engine.build --sanitize --out DIR   # ASan+UBSan variant (`make asan`;
                                                          # engine/README.md says how it
                                                          # runs under Python)
    CC=aarch64-linux-gnu-gcc python -m epbench.engine.build --out DIR   # cross-compiled

ORT's C headers ship in no PyPI or Debian package. They are fetched with `npm pack` from
the npm package named below (MIT, ORT 1.29 headers), checked against the npm integrity
hash, and only the `Headers/*.h` files are extracted into a cache folder that later builds
reuse. `ORT_INCLUDE_DIR` overrides the fetch (any ORT >= 1.29 include folder).

A wheel install carries these sources, not a library: the first `engine` arm builds it
into the cache (`epbench.engine.library`). This module imports only the standard library
and `epbench.core.paths` (the one cache-root rule), so `python -m epbench.engine.build` run
in another commit's worktree works from that worktree's PYTHONPATH alone.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from epbench.core.paths import cache_dir

NPM_PACKAGE = "com.github.asus4.onnxruntime"
NPM_VERSION = "0.4.9"
NPM_INTEGRITY = (
    "sha512-BkzxduSZ9IkeDP6Q8lz2TFU2ie7hSSvS7ZIfzMooExoq0CNzJnuuGaUJ7IsojBgqO4ouD1jXah8OYyJbCN29Fg=="
)
# Only these members are extracted: the iOS framework's headers are plain C/C++ headers.
HEADERS_PREFIX = (
    "package/Plugins/iOS~/onnxruntime.xcframework/ios-arm64/onnxruntime.framework/Headers/"
)
# The one header the engine includes (it pulls in onnxruntime_ep_c_api.h itself).
MAIN_HEADER = "onnxruntime_c_api.h"
# The ORT API version the engine is compiled against and requests at run time.
ORT_API_VERSION = 29

LIBRARY_NAME = "libepbench_engine.so"
ENGINE_VERSION = "0.1.0"
ENGINE_DIR = Path(__file__).resolve().parent
SOURCE_DIR = ENGINE_DIR / "src"
VERSION_SCRIPT = SOURCE_DIR / "epbench_engine.map"

# -fno-trapping-math: the engine never enables FP exception traps, and without it gcc
# refuses to turn the float selects of Sigmoid/Relu into vector blends. Results are
# unchanged (unlike -ffast-math, which would reassociate and drop NaN/inf semantics).
# -ffp-contract=fast: let a*b+c become one FMA where the CPU has it (ISO C mode turns this
# off); MatMul and Sigmoid get one rounding fewer, the exact ops have no a*b+c.
CFLAGS = ["-std=c11", "-O3", "-fno-trapping-math", "-ffp-contract=fast", "-Wall", "-Wextra",
          "-Werror", "-fPIC", "-fvisibility=hidden", "-pthread", "-D_POSIX_C_SOURCE=200809L"]
SANITIZE_FLAGS = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
                  "-fno-omit-frame-pointer", "-g"]


class EngineBuildError(RuntimeError):
    """The engine could not be built; the message says what to do."""


def cache_root() -> Path:
    """Where fetched ORT headers are kept: the epbench cache root's ort-headers/."""
    return cache_dir("ort-headers")


def integrity_of(path: Path) -> str:
    """The npm `integrity` string (sha512, base64) of a file."""
    digest = hashlib.sha512()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return "sha512-" + base64.b64encode(digest.digest()).decode("ascii")


def _extract_headers(tarball: Path, dest: Path) -> list[str]:
    """Extract only HEADERS_PREFIX/*.h (no subfolders, regular files) into dest."""
    names = []
    with tarfile.open(tarball, "r:gz") as tar:
        for member in tar:
            if not member.name.startswith(HEADERS_PREFIX) or not member.isfile():
                continue
            leaf = member.name[len(HEADERS_PREFIX):]
            if "/" in leaf or not leaf.endswith(".h"):
                continue
            source = tar.extractfile(member)
            if source is None:
                continue
            (dest / leaf).write_bytes(source.read())
            names.append(leaf)
    return names


def _fetch_headers(target: Path) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise EngineBuildError(
            "cannot get ONNX Runtime's C headers: `npm` is not installed. Either install npm "
            f"(the build runs `npm pack {NPM_PACKAGE}@{NPM_VERSION}` once and caches the "
            f"headers in {cache_root()}), or set ORT_INCLUDE_DIR to an ONNX Runtime >= 1.29 "
            f"include folder that contains {MAIN_HEADER}."
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        work = Path(tmp)
        proc = subprocess.run(
            [npm, "pack", f"{NPM_PACKAGE}@{NPM_VERSION}", "--silent"],
            cwd=work, capture_output=True, text=True,
        )
        tarballs = list(work.glob("*.tgz"))
        if proc.returncode != 0 or len(tarballs) != 1:
            raise EngineBuildError(
                f"`npm pack {NPM_PACKAGE}@{NPM_VERSION}` failed ({proc.stderr.strip()[-400:]}); "
                "check the network/npm registry, or set ORT_INCLUDE_DIR to an ONNX Runtime "
                f">= 1.29 include folder that contains {MAIN_HEADER}."
            )
        got = integrity_of(tarballs[0])
        if got != NPM_INTEGRITY:
            raise EngineBuildError(
                f"{tarballs[0].name} has integrity {got}, expected {NPM_INTEGRITY}: refusing "
                "to use it. Check your npm registry, or set ORT_INCLUDE_DIR."
            )
        staging = work / "headers"
        staging.mkdir()
        names = _extract_headers(tarballs[0], staging)
        if MAIN_HEADER not in names:
            raise EngineBuildError(
                f"{tarballs[0].name} holds no {MAIN_HEADER}; set ORT_INCLUDE_DIR instead."
            )
        (staging / "SOURCE.json").write_text(json.dumps(
            {"npm": f"{NPM_PACKAGE}@{NPM_VERSION}", "integrity": NPM_INTEGRITY,
             "headers": sorted(names)}, indent=1, sort_keys=True))
        # Rename is atomic: a concurrent build sees either no cache or a complete one.
        try:
            staging.rename(target)
        except OSError:
            if not (target / MAIN_HEADER).is_file():
                raise


def ort_include_dir() -> Path:
    """The folder holding onnxruntime_c_api.h: ORT_INCLUDE_DIR, else the (filled) cache."""
    override = os.environ.get("ORT_INCLUDE_DIR")
    if override:
        path = Path(override).expanduser()
        if not (path / MAIN_HEADER).is_file():
            raise EngineBuildError(
                f"ORT_INCLUDE_DIR={override} has no {MAIN_HEADER}: point it at an ONNX Runtime "
                ">= 1.29 include folder, or unset it to fetch the headers with npm."
            )
        return path
    cached = cache_root() / f"{NPM_PACKAGE}-{NPM_VERSION}"
    if not (cached / MAIN_HEADER).is_file():
        _fetch_headers(cached)
    return cached


def _compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if not cc:
        raise EngineBuildError("no C compiler found: install gcc (or set CC).")
    return cc


def _compiler_version(cc: str) -> str:
    proc = subprocess.run([cc, "--version"], capture_output=True, text=True)
    return proc.stdout.splitlines()[0].strip() if proc.returncode == 0 and proc.stdout else cc


def _target_machine(cc: str) -> str:
    """The CPU the compiler builds for (`gcc -dumpmachine`'s first part: x86_64, aarch64),
    which is not this machine's when CC is a cross compiler."""
    proc = subprocess.run([cc, "-dumpmachine"], capture_output=True, text=True)
    triple = proc.stdout.strip() if proc.returncode == 0 else ""
    return triple.split("-")[0] if triple else platform.machine()


def _c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def source_hash() -> str:
    """What a build of this engine depends on, hashed: its sources, flags and ORT API.

    Names the cache folder a wheel install builds into on first use, so an upgrade of
    epbench (new sources) builds anew and a rerun reuses the build.
    """
    digest = hashlib.sha256()
    for path in sorted(p for p in SOURCE_DIR.iterdir() if p.suffix in (".c", ".h", ".map")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(json.dumps([CFLAGS, ORT_API_VERSION, NPM_VERSION]).encode())
    return digest.hexdigest()[:16]


def _run_compiler(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise EngineBuildError(
            f"{what} the engine failed:\n" + " ".join(cmd) + "\n" + proc.stderr.strip())


def _compile(cc: str, flags: list[str], sources: list[Path], work: Path) -> list[Path]:
    """Each source to an object in ``work``, one compiler a core; the objects in the
    sources' order. One compiler for all of them took 4.3 s on this project's 2-core host,
    most of it in kernels_fused.c and kernels_elementwise.c; every compare-commits of the
    engine builds it twice."""
    objects = [work / f"{i:02d}-{source.stem}.o" for i, source in enumerate(sources)]
    # The cores this process may run on (taskset, a container's cpuset), not the host's.
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    with ThreadPoolExecutor(max_workers=max(1, min(len(sources), cores))) as pool:
        # list(): every compile ends (and its error is raised) before the objects are used.
        list(pool.map(lambda pair: _run_compiler(
            [cc, *flags, "-c", str(pair[0]), "-o", str(pair[1])], "compiling"),
            zip(sources, objects, strict=True)))
    return objects


def build(out_dir: Path, sanitize: bool = False) -> Path:
    """Compile the engine into out_dir/LIBRARY_NAME and return its path.

    The library is written to a temporary name and renamed into place, so a process that
    has the old library mapped keeps working.
    """
    include = ort_include_dir()
    cc = _compiler()
    sources = sorted(SOURCE_DIR.glob("*.c"))
    if not sources:
        raise EngineBuildError(f"no C sources in {SOURCE_DIR}: is this a complete checkout?")
    flags = CFLAGS + (SANITIZE_FLAGS if sanitize else [])
    info = {
        "version": ENGINE_VERSION,
        "compiler": _compiler_version(cc),
        "flags": " ".join(flags),
        "ort_api_version": ORT_API_VERSION,
        "sanitize": sanitize,
        # The SIMD clones (kernels' target_clones) exist on x86-64 only; any other target
        # gets the portable kernels, vectorized for its baseline ISA by -O3.
        "machine": _target_machine(cc),
    }
    # Work in out_dir/_build (git-ignored, removed by `make clean`): same filesystem as the
    # target, so the final rename is atomic.
    work_root = out_dir / "_build"
    work_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=work_root) as tmp:
        # The build description is compiled in, so build_info() is true of this very file.
        info_c = Path(tmp) / "build_info.c"
        info_c.write_text(
            "const char *epbench_build_info(void);\n"
            "__attribute__((visibility(\"default\")))\n"
            "const char *epbench_build_info(void) { return "
            + _c_string(json.dumps(info, sort_keys=True)) + "; }\n"
        )
        partial = Path(tmp) / LIBRARY_NAME
        objects = _compile(cc, [*flags, f"-DEBE_ORT_API_VERSION={ORT_API_VERSION}",
                                f"-I{include}", f"-I{SOURCE_DIR}"],
                           [*sources, info_c], Path(tmp))
        link = ["-shared", f"-Wl,--version-script={VERSION_SCRIPT}", "-lm"]
        if not sanitize:
            link.append("-Wl,--no-undefined")  # libasan resolves its symbols at load time
        _run_compiler([cc, *flags, *map(str, objects), "-o", str(partial), *link], "linking")
        target = out_dir / LIBRARY_NAME
        os.replace(partial, target)
    with contextlib.suppress(OSError):  # another build may be using it
        work_root.rmdir()
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m epbench.engine.build", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--inplace", action="store_true",
                       help=f"build engine/{LIBRARY_NAME} next to engine/__init__.py")
    where.add_argument("--out", type=Path, help="build into this folder")
    where.add_argument("--headers-only", action="store_true",
                       help="fetch/check the ORT headers and print their folder")
    parser.add_argument("--sanitize", action="store_true",
                        help="AddressSanitizer + UndefinedBehaviorSanitizer variant")
    args = parser.parse_args(argv)
    try:
        if args.headers_only:
            print(ort_include_dir())
            return 0
        out = ENGINE_DIR if args.inplace else args.out.resolve()
        path = build(out, sanitize=args.sanitize)
    except EngineBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(path)  # last line: callers (two-commit comparisons) read it
    return 0


if __name__ == "__main__":
    sys.exit(main())
