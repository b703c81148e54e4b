"""epbench installs beside PyPI's `harness`, `reports` and `cases`, and both sides import.

Those three names are other people's distributions. epbench installs one top-level
package, `epbench`, so its parts (`epbench.harness`, ...) cannot shadow them, nor they it.
The test builds a wheel the way a user would (`pip wheel .`: pure Python, the engine's C
sources as data), installs it into a fresh venv next to the three PyPI distributions,
and imports both sides from a folder outside the repository. With no compiler and no
npm on PATH, the installed epbench runs a plugin EP, and an `engine` arm says in one line
what it lacks; with them, the engine is compiled into the cache on first use.

Cost: the PyPI sdists are built into wheels once and then come from pip's cache; the
runtime dependencies are not installed again but borrowed from this venv through a
`.pth` line. That line only adds a folder to sys.path, so the `.pth` files inside it (the
editable finder that serves `epbench` from this checkout) never run there; the test
checks that `epbench` came from the wheel all the same. Needs the network to PyPI only
(the project's CI has it); offline, it skips, except under CI=true where it fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.support.staged import build_wheel, checkout_modules, copy_source

# The PyPI distributions whose names epbench's parts would have taken, pinned so that
# pip's wheel cache answers; and the one PyPI module each installs.
PYPI = {"harness==0.1.0": "harness", "reports==0.4.1": "reports", "cases==0.1.13": "cases"}
# What `import reports` (0.4.1) needs beyond epbench's own dependencies, `pkg_resources`
# included: the test extras' newer setuptools (84) no longer ships it.
PYPI_DEPENDENCIES = ("easydev==0.15.0", "colorlog==6.12.0", "colorama==0.4.6",
                        "pexpect==4.9.0", "ptyprocess==0.7.0", "platformdirs==4.14.9",
                        "line-profiler==5.1.0", "colormap==1.3.0", "setuptools==80.9.0")
# How pip says that it could not reach the index.
OFFLINE_SIGNS = ("No matching distribution", "NewConnectionError", "Could not fetch",
                 "Temporary failure in name resolution", "Network is unreachable")
PROBE = """
import importlib.util, json, sys, traceback
import epbench.harness.runner, epbench.reports.compare, epbench.cases.catalog
import epbench.engine
import harness, reports
try:
    import cases
    cases_failed_in = []
except Exception as exc:  # cases 0.1.13 and its dependency AllPairs are Python 2 code
    cases_failed_in = [frame.filename for frame in traceback.extract_tb(exc.__traceback__)]
print(json.dumps({
    "epbench": epbench.__file__,
    "epbench.harness.runner": epbench.harness.runner.__file__,
    "epbench.reports.compare": epbench.reports.compare.__file__,
    "epbench.cases.catalog": epbench.cases.catalog.__file__,
    "engine library": epbench.engine.library_path(),
    "harness": harness.__file__,
    "reports": reports.__file__,
    "cases": importlib.util.find_spec("cases").origin,
    "cases failed in": cases_failed_in,
    "meta_path": [type(f).__name__ if not isinstance(f, type) else f.__name__
                  for f in sys.meta_path],
}))
"""


def _run(*command: str | Path, cwd: Path,
         **env_changes: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(env_changes)
    return subprocess.run([str(c) for c in command], cwd=cwd, env=env, capture_output=True,
                          text=True)


def _pip(*args: str | Path, cwd: Path) -> None:
    done = _run(sys.executable, "-m", "pip", *args, cwd=cwd)
    if done.returncode != 0:
        offline = any(sign in done.stderr for sign in OFFLINE_SIGNS)
        if offline and os.environ.get("CI") != "true":
            pytest.skip(f"PyPI unreachable: {done.stderr.strip().splitlines()[-1]}")
        raise AssertionError(f"pip {' '.join(map(str, args))} failed:\n{done.stderr[-3000:]}")


@pytest.fixture(scope="module")
def user_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built the way a user builds it (`pip wheel .`, with build isolation),
    once for the tests that install it: each installs it into a venv of its own."""
    tmp_path = tmp_path_factory.mktemp("user-wheel")
    source = copy_source(tmp_path / "source")
    wheels = tmp_path / "wheels"
    _pip("wheel", "--quiet", "--no-deps", "--wheel-dir", wheels, source, cwd=tmp_path)
    (wheel,) = wheels.glob("epbench-*.whl")
    return wheel


@pytest.mark.slow
def test_epbench_installs_beside_pypi_harness_reports_and_cases(tmp_path: Path,
                                                               user_wheel: Path) -> None:
    wheel = user_wheel
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = venv / "bin" / "python"
    _pip("--python", python, "install", "--quiet", "--no-deps", wheel, *PYPI,
         *PYPI_DEPENDENCIES, cwd=tmp_path)
    site = Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))",
                     cwd=tmp_path).stdout.strip())
    (site / "zz_epbench_test_dependencies.pth").write_text(
        sysconfig.get_path("purelib") + "\n")

    outside = tmp_path / "elsewhere"  # not the repository: no `harness/` folder here
    outside.mkdir()
    from epbench.engine.build import ort_include_dir

    cache = tmp_path / "cache"  # the engine is compiled here on first use
    probe = _run(python, "-c", PROBE, cwd=outside, EPBENCH_CACHE_DIR=str(cache),
                 ORT_INCLUDE_DIR=str(ort_include_dir()))
    assert probe.returncode == 0, probe.stderr
    found = json.loads(probe.stdout)

    # epbench's side: every module from the wheel in the fresh venv, none from the checkout.
    for name in ("epbench", "epbench.harness.runner", "epbench.reports.compare",
                 "epbench.cases.catalog"):
        assert Path(found[name]).is_relative_to(site / "epbench"), (name, found[name])
    assert not any("editable" in finder.lower() for finder in found["meta_path"])
    # The wheel carries no library: the first use compiled the engine into the cache.
    assert not list((site / "epbench").rglob("*.so"))
    assert Path(found["engine library"]).is_relative_to(cache / "engine")
    assert Path(found["engine library"]).name == "libepbench_engine.so"
    # PyPI's side: each name is the PyPI distribution's own package.
    for name in PYPI.values():
        assert Path(found[name]) == site / name / "__init__.py", (name, found[name])
    # cases 0.1.13 installs but cannot import on Python 3 (it and its dependency are Python 2
    # code); its failure comes from PyPI's package, so the name reached it and not epbench.
    assert str(site / "cases" / "__init__.py") in found["cases failed in"]


@pytest.mark.slow
def test_the_wheel_runs_a_plugin_ep_without_a_compiler_or_npm(tmp_path: Path,
                                                              user_wheel: Path) -> None:
    pytest.importorskip("nxrt_ep_cpu")
    wheel = user_wheel
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    bare_path = str(venv / "bin")  # no gcc, cc or npm on it
    _pip("--python", venv / "bin" / "python", "install", "--quiet", "--no-deps", wheel,
         cwd=tmp_path)
    site = Path(_run(venv / "bin" / "python", "-c",
                     "import sysconfig; print(sysconfig.get_path('purelib'))",
                     cwd=tmp_path).stdout.strip())
    (site / "zz_epbench_test_dependencies.pth").write_text(
        sysconfig.get_path("purelib") + "\n")
    epbench = venv / "bin" / "epbench"
    fast = ("--rounds", "2", "--processes", "1", "--block-ms", "0.2", "--warmup-ms", "1",
            "--gate", "off", "--quiet")
    env = {"PATH": bare_path, "EPBENCH_CACHE_DIR": str(tmp_path / "cache")}

    ran = _run(epbench, "run", "--case", "relu_d1_w8", "--arm", "ort", "--arm",
               "plugin:nxrt_ep_cpu", "--out", tmp_path / "out", *fast, cwd=tmp_path, **env)
    assert ran.returncode == 0, ran.stderr
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert set(doc["cases"]["relu_d1_w8"]["arms"]) == {"ort", "plugin:nxrt_ep_cpu"}

    refused = _run(epbench, "run", "--case", "relu_d1_w8", "--arm", "engine", "--out",
                   tmp_path / "engine-out", *fast, cwd=tmp_path, **env)
    assert refused.returncode == 1
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, refused.stderr
    assert "cannot be: no C compiler found: install gcc (or set CC)." in lines[0] or (
        "`npm` is not installed" in lines[0]), lines[0]


# Every module of the installed package, imported by name from outside the repository.
IMPORT_ALL = """
import importlib, json, sys
names = json.loads(sys.argv[1])
files = {name: importlib.import_module(name).__file__ for name in names}
print(json.dumps({"files": files,
                  "meta_path": [getattr(f, "__name__", type(f).__name__) for f in sys.meta_path]}))
"""


@pytest.mark.slow
def test_the_wheel_installs_every_module_and_each_imports_from_it(tmp_path: Path) -> None:
    # docs/design.md, "No links": the parts are mapped into the package, not linked; the
    # wheel holds every module of the checkout under `epbench/`, and each imports from there.
    wheel = build_wheel(tmp_path / "wheels")  # offline: no build isolation
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = venv / "bin" / "python"
    _pip("--python", python, "install", "--quiet", "--no-deps", "--no-index", wheel,
         cwd=tmp_path)
    site = Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))",
                     cwd=tmp_path).stdout.strip())
    (site / "zz_epbench_test_dependencies.pth").write_text(
        sysconfig.get_path("purelib") + "\n")

    installed = {".".join(p.relative_to(site).with_suffix("").parts).removesuffix(".__init__"): p
                 for p in (site / "epbench").rglob("*.py")}
    assert set(installed) == set(checkout_modules())
    assert len(installed) > 90
    # The data the package reads at run time came along.
    for data in ("cases/grids/default.toml", "engine/src/plugin.c", "engine/src/ep.c",
                 "engine/src/epbench_engine.map", "reports/templates/comment.md.j2",
                 "reports/comparison.schema.json", "core/results.schema.json"):
        assert (site / "epbench" / data).is_file(), data

    outside = tmp_path / "elsewhere"  # not the repository: no `epbench/` or `harness/` here
    outside.mkdir()
    probe = _run(python, "-c", IMPORT_ALL, json.dumps(sorted(installed)), cwd=outside)
    assert probe.returncode == 0, probe.stderr
    found = json.loads(probe.stdout)
    assert found["files"] == {name: str(path) for name, path in installed.items()}
    assert not any("editable" in finder.lower() for finder in found["meta_path"])
