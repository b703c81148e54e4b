"""The engine's build: header fetch and cache, the compiled library's exports, and the
Python handle (`library_path`, `build_info`).

The header fetch is exercised with a fake `npm` on PATH (no network): it must check the
npm integrity, extract only the framework's Headers/*.h, and reuse its cache.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from epbench import engine
from epbench.engine import build as engine_build
from epbench.harness.isolation import ENGINE_BUILD

EXPORTS = {"CreateEpFactories", "ReleaseEpFactory", "epbench_probe_snapshot",
           "epbench_probe_snapshot_ep", "epbench_probe_reset", "epbench_probe_name",
           "epbench_probe_spins_for_ns",
           "epbench_build_info"}


@pytest.fixture(scope="module")
def built_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`python -m epbench.engine.build --out DIR`, as a two-commit comparison runs it: in
    the checkout, which nothing installed (-S: no site-packages, so no editable finder),
    with the checkout first on PYTHONPATH."""
    out = tmp_path_factory.mktemp("engine-out")
    root = Path(engine.__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-S", "-c", ENGINE_BUILD, "--out", str(out)],
                          cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    last_line = proc.stdout.strip().splitlines()[-1]
    assert Path(last_line) == out / engine.LIBRARY_NAME
    return Path(last_line)


def test_out_build_exports_only_the_entry_points_and_probe(built_out: Path) -> None:
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) is not installed")
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(built_out)],
                             capture_output=True, text=True, check=True).stdout
    exported = {line.split()[-1] for line in symbols.splitlines()
                if len(line.split()) == 3 and line.split()[1] in "TtDdBbRr"}
    assert exported == EXPORTS


def test_library_does_not_link_libpython(built_out: Path) -> None:
    if shutil.which("readelf") is None:
        pytest.skip("readelf (binutils) is not installed")
    dynamic = subprocess.run(["readelf", "-d", str(built_out)], capture_output=True, text=True,
                             check=True).stdout
    needed = re.findall(r"\(NEEDED\).*\[(.+?)\]", dynamic)
    assert needed, dynamic
    assert not [lib for lib in needed if "python" in lib]


def _mnemonics(library: Path, symbol: str) -> tuple[list[str], str]:
    """One function's instructions, by objdump (skips where it cannot disassemble one)."""
    if shutil.which("objdump") is None:
        pytest.skip("objdump (binutils) is not installed")
    proc = subprocess.run(["objdump", "-d", f"--disassemble={symbol}", str(library)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"objdump cannot disassemble one symbol (binutils >= 2.32): {proc.stderr}")
    mnemonics = [fields[2].split()[0].removesuffix("q") for fields in
                 (line.split("\t") for line in proc.stdout.splitlines())
                 if len(fields) >= 3 and fields[2].strip()]
    assert mnemonics, f"no {symbol} in the listing (stripped?):\n{proc.stdout}"
    return mnemonics, proc.stdout


def test_the_per_run_delay_ends_in_a_fence_and_the_per_node_one_does_not(
        built_out: Path) -> None:
    # Without the fence an out-of-order core runs what follows the per-Run loop beside the
    # chain's tail, and it adds only 0.83-0.94 of what it asks; a fence after every node
    # added about 4 ns a node beyond the per-node knob's ask (engine/src/delay.c).
    if engine.build_info(str(built_out))["machine"] != "x86_64":
        pytest.skip("the fence is x86's (with SSE2); other targets have none")
    per_run, listing = _mnemonics(built_out, "ebe_delay_loop")
    exits = [i for i, mnemonic in enumerate(per_run) if mnemonic == "ret"]
    assert exits, listing
    for i in exits:  # every way out passes the fence (a frame may be popped between)
        before = [m for m in per_run[:i] if m not in ("pop", "leave")]
        assert before and before[-1] == "lfence", listing
    per_node, listing = _mnemonics(built_out, "ebe_delay_chain")
    assert "lfence" not in per_node and "lea" in per_node, listing
    callers: dict[str, set[str]] = {}  # callee -> the functions that call it
    function = ""
    for line in subprocess.run(["objdump", "-d", str(built_out)], capture_output=True,
                               text=True, check=True).stdout.splitlines():
        if start := re.match(r"[0-9a-f]+ <([^>]+)>:$", line):
            function = start.group(1)
        elif call := re.search(r"\bcallq?\s+\S+\s+<([^>+]+)>", line):
            callers.setdefault(call.group(1), set()).add(function)
    # The plan (both its per-node paths) spins the chain, never the fenced loop.
    assert any(f.startswith("ebe_plan") for f in callers.get("ebe_delay_chain", ())), callers
    assert not [f for f in callers.get("ebe_delay_loop", ()) if f.startswith("ebe_plan")]


def test_build_info_describes_the_file(built_out: Path) -> None:
    info = engine.build_info(str(built_out))
    assert info["ort_api_version"] == 29
    assert info["sanitize"] is False
    assert "-O3" in info["flags"] and "-std=c11" in info["flags"]
    assert info["compiler"]
    assert info["library"] == str(built_out.resolve())
    header = (engine_build.SOURCE_DIR / "ebe_common.h").read_text()
    c_version = re.search(r'#define EBE_VERSION "(.+?)"', header).group(1)
    assert info["version"] == engine_build.ENGINE_VERSION == c_version


def test_without_an_in_place_build_the_engine_is_built_into_the_cache_once(
        monkeypatch, tmp_path) -> None:
    # A wheel install has the sources and no library: the first use compiles them into
    # the cache, keyed by their hash, and later uses find that build.
    from epbench.engine import library

    monkeypatch.setenv("ORT_INCLUDE_DIR", str(engine_build.ort_include_dir()))
    monkeypatch.setenv("EPBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(library, "in_place_path", lambda: tmp_path / "not_built_here.so")
    built = []
    real_build = engine_build.build
    monkeypatch.setattr(engine_build, "build", lambda out: built.append(out) or real_build(out))
    first = engine.library_path()
    assert Path(first).parent == tmp_path / "cache" / "engine" / engine_build.source_hash()
    assert engine.build_info(first)["version"] == engine_build.ENGINE_VERSION
    assert engine.library_path() == first
    assert len(built) == 1


@pytest.mark.parametrize(("missing", "needle"), [
    ("compiler", "cannot be: no C compiler found: install gcc (or set CC)."),
    ("headers", "cannot be: cannot get ONNX Runtime's C headers: `npm` is not installed."),
])
def test_an_engine_that_cannot_be_built_is_one_line_saying_what_is_missing(
        monkeypatch, tmp_path, missing, needle) -> None:
    from epbench.core.errors import ArmError
    from epbench.engine import library

    monkeypatch.setenv("EPBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(library, "in_place_path", lambda: tmp_path / "not_built_here.so")
    monkeypatch.delenv("ORT_INCLUDE_DIR", raising=False)
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no npm, no gcc
    monkeypatch.delenv("CC", raising=False)
    if missing == "compiler":
        monkeypatch.setenv("ORT_INCLUDE_DIR", str(_fake_headers_dir(tmp_path)))
    with pytest.raises(ArmError) as raised:
        engine.library_path()
    message = str(raised.value)
    assert "\n" not in message
    assert needle in message
    assert not (tmp_path / "cache" / "engine" / engine_build.source_hash()
                / engine_build.LIBRARY_NAME).exists()


def _fake_headers_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "include"
    folder.mkdir()
    (folder / engine_build.MAIN_HEADER).write_text("/* stands in for ORT's header */\n")
    return folder


# ---- header fetch -------------------------------------------------------------------------

HEADER_DIR = engine_build.HEADERS_PREFIX


def _fake_package(tmp_path: Path) -> bytes:
    """A .tgz shaped like the npm package: headers, a nested header, and other files."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in {
            HEADER_DIR + "onnxruntime_c_api.h": "/* fake main header */\n",
            HEADER_DIR + "onnxruntime_ep_c_api.h": "/* fake ep header */\n",
            HEADER_DIR + "nested/ignored.h": "/* must not be extracted */\n",
            HEADER_DIR + "README.txt": "not a header\n",
            "package/Plugins/Android/other.h": "/* other platform */\n",
            "package/package.json": "{}\n",
        }.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture
def fake_npm(tmp_path: Path, monkeypatch) -> dict:
    """Put a fake `npm` on PATH that drops the fake package and counts its calls."""
    package = tmp_path / "package.tgz"
    package.write_bytes(_fake_package(tmp_path))
    calls = tmp_path / "npm-calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "npm"
    script.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n"
                      f"cp {package} ./com.github.asus4.onnxruntime-0.4.9.tgz\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("EPBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ORT_INCLUDE_DIR", raising=False)
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(package.read_bytes()).digest()).decode()
    return {"calls": calls, "integrity": integrity}


def test_fetch_refuses_a_package_with_the_wrong_integrity(fake_npm) -> None:
    with pytest.raises(engine_build.EngineBuildError, match="integrity.*refusing"):
        engine_build.ort_include_dir()
    assert not (engine_build.cache_root() / "com.github.asus4.onnxruntime-0.4.9").exists()


def test_fetch_extracts_only_the_headers_and_reuses_the_cache(fake_npm, monkeypatch) -> None:
    monkeypatch.setattr(engine_build, "NPM_INTEGRITY", fake_npm["integrity"])
    include = engine_build.ort_include_dir()
    assert sorted(p.name for p in include.iterdir()) == [
        "SOURCE.json", "onnxruntime_c_api.h", "onnxruntime_ep_c_api.h"]
    assert fake_npm["calls"].read_text().split() == ["pack",
                                                     "com.github.asus4.onnxruntime@0.4.9",
                                                     "--silent"]
    assert engine_build.ort_include_dir() == include
    assert len(fake_npm["calls"].read_text().splitlines()) == 1  # the cache answered


def test_no_npm_and_no_include_dir_gives_both_ways_out(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on it
    monkeypatch.setenv("EPBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ORT_INCLUDE_DIR", raising=False)
    with pytest.raises(engine_build.EngineBuildError) as caught:
        engine_build.ort_include_dir()
    message = str(caught.value)
    assert "install npm" in message and "ORT_INCLUDE_DIR" in message


def test_include_dir_override(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ORT_INCLUDE_DIR", str(tmp_path))
    with pytest.raises(engine_build.EngineBuildError, match="has no onnxruntime_c_api.h"):
        engine_build.ort_include_dir()
    (tmp_path / "onnxruntime_c_api.h").write_text("/* */\n")
    assert engine_build.ort_include_dir() == tmp_path


def test_cli_reports_a_build_error_in_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("ORT_INCLUDE_DIR", str(tmp_path))
    assert engine_build.main(["--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ORT_INCLUDE_DIR=") and "Traceback" not in err


def test_a_source_that_does_not_compile_is_named_and_no_library_is_left(
        tmp_path: Path, monkeypatch) -> None:
    """The sources compile one compiler a core: the one that fails is the error, with the
    compiler's own line, and nothing is written where the library goes."""
    sources = tmp_path / "src"
    shutil.copytree(engine_build.SOURCE_DIR, sources)
    broken = sources / "kernels_matmul.c"
    broken.write_text(broken.read_text() + "\n#error planted for the test\n")
    monkeypatch.setattr(engine_build, "SOURCE_DIR", sources)
    out = tmp_path / "out"
    with pytest.raises(engine_build.EngineBuildError) as caught:
        engine_build.build(out)
    message = str(caught.value)
    assert message.startswith("compiling the engine failed:\n")
    assert f"-c {broken} " in message and "planted for the test" in message
    assert not (out / engine.LIBRARY_NAME).exists()


CROSS_CC = "aarch64-linux-gnu-gcc"


def test_the_engine_cross_compiles_for_aarch64(tmp_path: Path) -> None:
    """An arm64 user gets the portable kernels: x86-64-only code (the SIMD clones) stays
    behind its guard, so the whole engine builds with -Werror for aarch64."""
    import json
    import os

    cc = shutil.which(CROSS_CC)
    if cc is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{CROSS_CC} is missing on CI: `make test` installs it when CI=true "
                        "(Makefile target cross-toolchain)")
        pytest.skip(f"{CROSS_CC} is not installed (apt-get install gcc-aarch64-linux-gnu); "
                    "CI installs it and runs this test")
    if shutil.which("readelf") is None:
        pytest.skip("readelf (binutils) is not installed")
    proc = subprocess.run([sys.executable, "-m", "epbench.engine.build", "--out", str(tmp_path)],
                          env={**os.environ, "CC": cc}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    library = tmp_path / engine.LIBRARY_NAME
    header = subprocess.run(["readelf", "-h", str(library)], capture_output=True, text=True,
                            check=True).stdout
    assert re.search(r"Machine:\s+AArch64", header), header
    symbols = subprocess.run(["readelf", "--dyn-syms", "-W", str(library)],
                             capture_output=True, text=True, check=True).stdout
    exported = {f[7] for f in (line.split() for line in symbols.splitlines())
                if len(f) >= 8 and f[4] == "GLOBAL" and f[6] != "UND"}
    assert exported == EXPORTS
    info = re.search(rb'\{"compiler": [^\x00]*\}', library.read_bytes())
    assert info is not None
    assert json.loads(info.group().decode())["machine"] == "aarch64"
