"""Memory safety: the differential and run-time tests under AddressSanitizer+UBSan, and a
small case under valgrind memcheck.

How the sanitizer build runs under Python (also what `make asan` does):
    python -m epbench.engine.build --sanitize --out DIR  # DIR/libepbench_engine.so
    LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so)" \
    ASAN_OPTIONS=detect_leaks=0 EBE_TEST_LIBRARY=DIR/libepbench_engine.so \
        python -m pytest tests/test_engine_differential.py tests/test_engine_runtime.py
The ASan runtime must be the first library loaded, hence LD_PRELOAD into the interpreter;
libstdc++ is preloaded with it because CPython does not link it, and ASan's C++ exception
interceptor (ORT throws internally) must find it at start-up. Leak detection is off because
CPython and ORT keep memory until exit by design. Errors in the engine abort the process
with a report (UBSan too: -fno-sanitize-recover); reports go to a log file the test reads.

Valgrind sees every library in the process, and ld.so, CPython and ORT have reports of
their own; the test counts only errors with a frame in the engine library.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from epbench import engine
from epbench.cases.builders import binary_chain, chain, matmul

ROOT = Path(engine.__file__).resolve().parent.parent


def _runtime_library(name: str) -> str | None:
    """Path of a compiler runtime library (libasan.so, libstdc++.so), None if absent."""
    cc = os.environ.get("CC") or shutil.which("gcc")
    if cc is None:
        return None
    found = subprocess.run([cc, f"-print-file-name={name}"], capture_output=True, text=True)
    path = found.stdout.strip()
    return path if found.returncode == 0 and os.path.isabs(path) and os.path.exists(path) else None


def _preload() -> str | None:
    libraries = [_runtime_library("libasan.so"), _runtime_library("libstdc++.so")]
    return " ".join(libraries) if all(libraries) else None  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def sanitized_library(tmp_path_factory: pytest.TempPathFactory) -> str:
    from epbench.engine.build import EngineBuildError, build

    if _preload() is None:
        pytest.skip("no libasan.so/libstdc++.so next to the C compiler: cannot run ASan")
    try:
        return str(build(tmp_path_factory.mktemp("asan"), sanitize=True))
    except EngineBuildError as exc:
        pytest.skip(f"cannot build the sanitizer variant: {str(exc)[:300]}")


@pytest.mark.slow
def test_differential_and_runtime_tests_pass_under_asan_and_ubsan(sanitized_library,
                                                                 tmp_path: Path) -> None:
    log = tmp_path / "sanitizer"
    env = dict(os.environ, LD_PRELOAD=_preload() or "", EBE_TEST_LIBRARY=sanitized_library,
               ASAN_OPTIONS=f"detect_leaks=0:exitcode=86:log_path={log}",
               UBSAN_OPTIONS=f"print_stacktrace=1:halt_on_error=1:exitcode=87:log_path={log}")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
         "tests/test_engine_differential.py", "tests/test_engine_runtime.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    logs = "".join(p.read_text(errors="replace") for p in tmp_path.glob("sanitizer*"))
    report = logs[:4000] + proc.stdout[-2000:] + proc.stderr[-2000:]
    # No report is evidence only from an instrumented library: every object was compiled
    # with the sanitizers (each source compiles apart, engine/build.py).
    symbols = subprocess.run(["nm", "-D", "--undefined-only", sanitized_library],
                             capture_output=True, text=True, check=True).stdout
    assert "__asan_report_" in symbols and "__ubsan_handle_" in symbols
    assert "ERROR: AddressSanitizer" not in report, report
    assert "runtime error:" not in report, report
    assert proc.returncode == 0, report


# The models are built by the test, outside valgrind: building them imports onnx, which
# alone took 35 of the 49 s the process took under memcheck, and runs no engine code.
# Under valgrind the script reads their bytes: the engine's paths are the same.
VALGRIND_MODELS = {
    "relu": lambda: chain("Relu", 3, 8, True),
    "add": lambda: binary_chain("Add", 2, 8, False),
    "matmul": lambda: matmul(2, 8, 4, False),
}
VALGRIND_SCRIPT = """
import sys
from pathlib import Path
import numpy as np
from tests.support.engine_sessions import engine_session

library, models = sys.argv[1], Path(sys.argv[2])
relu_model = (models / "relu.onnx").read_bytes()
for partition in ("fused", "per_node", "kernel"):
    relu = engine_session(relu_model, library, "vg", {"partition": partition}, "disabled")
    for batch in (1, 4, 2):  # the scratch arena grows once, then is reused
        x = np.linspace(-1, 1, 8 * batch, dtype=np.float32).reshape(batch, 8)
        assert np.array_equal(relu.run(None, {"x": x})[0], np.maximum(x, 0))
add = engine_session((models / "add.onnx").read_bytes(), library, "vg")
ones = np.ones((1, 8), np.float32)
assert np.array_equal(add.run(None, {"x": ones, "y": ones})[0], 3 * ones)
mm = engine_session((models / "matmul.onnx").read_bytes(), library, "vg")
got = mm.run(None, {"a": np.ones((2, 8), np.float32), "b": np.ones((8, 4), np.float32)})[0]
assert np.array_equal(got, np.full((2, 4), 8, np.float32))
print("ok")
"""


def engine_errors(xml_text: str, library_name: str) -> list[str]:
    """Kinds of the valgrind errors with a frame in the engine library."""
    kinds = []
    for error in ET.fromstring(xml_text).iter("error"):
        objects = [frame.findtext("obj") or "" for frame in error.iter("frame")]
        if any(obj.endswith(library_name) for obj in objects):
            kinds.append(error.findtext("kind") or "?")
    return kinds


def test_engine_errors_filters_by_library() -> None:
    xml = ("<valgrindoutput><error><kind>InvalidWrite</kind><stack><frame>"
           "<obj>/x/libepbench_engine.so</obj></frame></stack></error><error><kind>UninitValue"
           "</kind><stack><frame><obj>/x/libonnxruntime.so</obj></frame></stack></error>"
           "</valgrindoutput>")
    assert engine_errors(xml, engine.LIBRARY_NAME) == ["InvalidWrite"]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_small_cases_are_clean_under_valgrind_memcheck(tmp_path: Path) -> None:
    library = os.environ.get("EBE_TEST_LIBRARY") or engine.library_path()
    xml_file = tmp_path / "memcheck.xml"
    models = tmp_path / "models"
    models.mkdir()
    for name, build in VALGRIND_MODELS.items():
        (models / f"{name}.onnx").write_bytes(build().SerializeToString())
    proc = subprocess.run(
        ["valgrind", "--tool=memcheck", "--leak-check=no", "--xml=yes",
         f"--xml-file={xml_file}", sys.executable, "-c", VALGRIND_SCRIPT, library, models],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ok" in proc.stdout
    assert engine_errors(xml_file.read_text(), Path(library).name) == []
