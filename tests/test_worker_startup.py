"""A timed worker starts without onnx: the runner builds each case once and saves it
(cases.built), and its workers read what was saved.

onnx's import (ml_dtypes, mostly) was most of a worker's start, paid by each of a run's
dozens of workers (docs/validation/summaries.tar.xz:run_time.txt).
"""

from __future__ import annotations

import errno
import os
import re
import tempfile
from pathlib import Path

import pytest

# Stands in for onnx on the workers' PYTHONPATH: a worker that imports it dies at once.
POISON = """import os, sys
sys.stderr.write("a timed worker imported onnx\\n")
sys.stderr.flush()
os._exit(97)
"""


@pytest.mark.slow
def test_timed_workers_never_import_onnx(tmp_path, monkeypatch) -> None:
    from epbench.cases.grids import case_by_name
    from epbench.harness.arms import parse_arm
    from epbench.harness.run_config import RunConfig
    from epbench.harness.runner import run

    (tmp_path / "poison" / "onnx").mkdir(parents=True)
    (tmp_path / "poison" / "onnx" / "__init__.py").write_text(POISON)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "poison"))
    names = ("relu_d1_w8", "add_d10_w8")  # node counts apart: each worker got its own case
    doc = run(RunConfig(cases=tuple(case_by_name(n) for n in names),
                        arms=(parse_arm("engine"),), rounds=4, processes=2, sessions=1,
                        warmup_ms=5.0, gate_policy="off")).to_dict()
    for name in names:
        case = doc["cases"][name]
        assert case["status"] == "ok", case["error"]
        assert len(case["rounds"]) == 4 and {r["process"] for r in case["rounds"]} == {0, 1}
        # Process 0 measured the harness's overhead on the saved one-node case.
        assert case["overhead"]["ort_trivial_run_ns"] > 0
        # Every node ran on the engine: the saved model is the case's own.
        assert case["arms"]["engine"]["nodes_executed"] == case_by_name(name).n_nodes


def test_save_cases_saves_each_case_under_its_name_and_the_overhead_case(tmp_path) -> None:
    from epbench.cases.built import load_built_case
    from epbench.cases.grids import case_by_name
    from epbench.harness.overhead import OVERHEAD_CASE
    from epbench.harness.runner import save_cases

    specs = [case_by_name(n) for n in ("add_d10_w8", "relu_d10_w8", "matmul_64x64")]
    saved, overhead = save_cases(specs, tmp_path / "cases")
    assert {name: load_built_case(r).definition_sha256 for name, r in saved.items()} == {
        s.name: s.definition_sha256 for s in specs}
    assert (load_built_case(overhead).definition_sha256
            == case_by_name(OVERHEAD_CASE).definition_sha256)


def test_a_case_that_cannot_be_saved_says_where_and_what_to_do(tmp_path) -> None:
    from epbench.cases.grids import case_by_name
    from epbench.core.errors import EpbenchError
    from epbench.harness.runner import save_cases

    (tmp_path / "file").write_text("")
    with pytest.raises(EpbenchError, match=r"cannot save case relu_d1_w8 for the workers in "
                       r".*file/cases \(Not a directory\); point TMPDIR at a folder you can "
                       r"write to$"):
        save_cases([case_by_name("relu_d1_w8")], tmp_path / "file" / "cases")


def full_disk(*_: object, **__: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_temp_folder_says_to_make_room_and_names_the_overhead_case(
        tmp_path, monkeypatch) -> None:
    import tempfile

    from epbench.cases.built import save_built_case
    from epbench.cases.grids import case_by_name
    from epbench.core.errors import EpbenchError
    from epbench.harness import runner
    from epbench.harness.overhead import OVERHEAD_CASE

    def full_for_overhead(built, folder, stem):
        if stem == "overhead":
            full_disk()
        return save_built_case(built, folder, stem)

    monkeypatch.setattr(runner, "save_built_case", full_for_overhead)
    room = (rf"\({os.strerror(errno.ENOSPC)}\); free space in "
            rf"{re.escape(tempfile.gettempdir())} or point TMPDIR at a folder with room$")
    with pytest.raises(EpbenchError, match=r"cannot save the harness's overhead case "
                       rf"\({OVERHEAD_CASE}\) for the workers in .* " + room):
        runner.save_cases([case_by_name("add_d10_w8")], tmp_path / "cases")


def test_a_case_that_cannot_be_saved_leaves_the_output_folder_as_it_was(
        tmp_path, monkeypatch) -> None:
    from dataclasses import replace

    from epbench.cases.grids import case_by_name
    from epbench.core.errors import EpbenchError
    from epbench.harness import run_config, runner
    from epbench.harness.arms import parse_arm

    monkeypatch.setattr(runner, "save_built_case", full_disk)
    config = run_config.RunConfig(cases=(case_by_name("relu_d1_w8"),), arms=(parse_arm("ort"),),
                                  rounds=2, processes=1, sessions=1, gate_policy="off",
                                  out_dir=tmp_path / "out")
    with pytest.raises(EpbenchError, match="cannot save case relu_d1_w8"):
        runner.run(config)
    assert not (tmp_path / "out").exists()
    # An earlier run's results survive a run with --overwrite that never got to measure.
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "results.json").write_text("earlier")
    with pytest.raises(EpbenchError, match="cannot save case relu_d1_w8"):
        runner.run(replace(config, out_dir=tmp_path / "old", overwrite=True))
    assert [p.name for p in (tmp_path / "old").iterdir()] == ["results.json"]
    assert (tmp_path / "old" / "results.json").read_text() == "earlier"
    # Nor does one stopped while the saved cases are read back to be hashed.
    monkeypatch.undo()

    def stopped(record):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "load_built_case", stopped)
    with pytest.raises(KeyboardInterrupt):
        runner.run(replace(config, out_dir=tmp_path / "old", overwrite=True))
    assert [p.name for p in (tmp_path / "old").iterdir()] == ["results.json"]


def test_a_refused_output_folder_is_said_before_any_case_is_built(tmp_path, monkeypatch) -> None:
    from epbench.cases.grids import case_by_name
    from epbench.cases.spec import CaseSpec
    from epbench.core.errors import ResultsError
    from epbench.harness import run_config, runner
    from epbench.harness.arms import parse_arm

    def never(self):
        raise AssertionError("a case was built before --out was checked")

    monkeypatch.setattr(CaseSpec, "build", never)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "results.jsonl").write_text("earlier")
    config = run_config.RunConfig(cases=(case_by_name("relu_d1_w8"),), arms=(parse_arm("ort"),),
                                  rounds=2, processes=1, sessions=1, gate_policy="off",
                                  out_dir=tmp_path / "out")
    with pytest.raises(ResultsError, match=r"results\.jsonl already exists; choose another "
                       r"--out or pass --overwrite"):
        runner.run(config)
    assert (tmp_path / "out" / "results.jsonl").read_text() == "earlier"


def test_a_twin_copy_on_a_full_temp_folder_says_to_make_room(tmp_path, monkeypatch) -> None:
    import shutil

    from epbench.core.errors import ArmError
    from epbench.harness.arms import copy_library

    monkeypatch.setattr(shutil, "copy2", full_disk)
    with pytest.raises(ArmError, match=r"cannot copy .*lib\.so for the A/A twin "
                       rf"\({os.strerror(errno.ENOSPC)}\); free space in .* or point TMPDIR "
                       r"at a folder with room$"):
        copy_library(str(tmp_path / "lib.so"), tmp_path)


def test_a_copy_on_a_noexec_mount_is_refused_in_one_line(tmp_path, monkeypatch) -> None:
    """A CI container's /tmp may be mounted noexec: a copy there would fail to load with
    the loader's error, which does not say why, so the copy is refused before it is made."""
    from epbench.core.errors import ArmError
    from epbench.harness import arms

    real_statvfs = os.statvfs
    noexec = tmp_path / "noexec"

    class Flags:
        def __init__(self, real: os.statvfs_result, noexec: bool) -> None:
            # The real flags, the noexec one as this test says (so it runs on a host whose
            # temp folder is mounted noexec too).
            self.f_flag = (real.f_flag & ~os.ST_NOEXEC) | (os.ST_NOEXEC if noexec else 0)

    def statvfs(path: str | os.PathLike[str]) -> Flags:
        return Flags(real_statvfs(path), Path(path) == noexec)

    monkeypatch.setattr(arms.os, "statvfs", statvfs)
    library = tmp_path / "lib.so"
    library.write_bytes(b"\x7fELF")
    copied = arms.copy_library(str(library), tmp_path / "exec")
    assert copied == str(tmp_path / "exec" / "twin-lib.so") and Path(copied).is_file()
    with pytest.raises(ArmError) as error:
        arms.copy_library(str(library), noexec)
    assert str(error.value) == (
        f"cannot copy {library} for the A/A twin: {tempfile.gettempdir()} is on a file system "
        "mounted noexec, so a library copied there cannot be loaded; point TMPDIR at a folder "
        "on one mounted with exec, or run without the A/A twin (--no-aa-twin)")
    assert not any(noexec.iterdir())  # nothing copied there

    # A file system that cannot say (statvfs fails there): the copy goes ahead, as before.
    def failing_statvfs(path: str | os.PathLike[str]) -> Flags:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    monkeypatch.setattr(arms.os, "statvfs", failing_statvfs)
    assert Path(arms.copy_library(str(library), tmp_path / "unsure")).is_file()


def test_a_case_that_cannot_be_built_fails_alone(tmp_path, monkeypatch) -> None:
    """As when each worker built its case: the case is failed, with the reason, and the
    run measures the others."""
    from epbench.cases.grids import case_by_name
    from epbench.cases.spec import CaseSpec
    from epbench.core.errors import CaseError
    from epbench.harness import run_config, runner
    from epbench.harness.arms import parse_arm

    build = CaseSpec.build

    def build_but_one(self):
        if self.name == "add_d10_w8":
            raise CaseError("input 'x' has no --dim")
        return build(self)

    monkeypatch.setattr(CaseSpec, "build", build_but_one)
    doc = runner.run(run_config.RunConfig(
        cases=(case_by_name("add_d10_w8"), case_by_name("relu_d1_w8")), arms=(parse_arm("ort"),),
        rounds=2, processes=1, sessions=1, warmup_ms=5.0, gate_policy="off")).to_dict()
    failed, ok = doc["cases"]["add_d10_w8"], doc["cases"]["relu_d1_w8"]
    assert (failed["status"], failed["error_kind"], failed["error"]) == (
        "failed", "case", "cannot build case add_d10_w8: input 'x' has no --dim")
    assert failed["rounds"] == [] and failed["definition_sha256"] is None
    assert ok["status"] == "ok" and len(ok["rounds"]) == 2
    assert ok["definition_sha256"] == case_by_name("relu_d1_w8").definition_sha256
