"""The harness commands: bad input gets one clear line and a documented exit code."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from epbench.cli.main import cli
from epbench.core.errors import EXIT_CODES, EXIT_GATE, EXIT_USAGE, EXIT_USER_ERROR

FAST = ["--rounds", "2", "--block-ms", "0.2", "--max-block-iters", "10", "--warmup-ms", "1",
        "--gate", "off", "--quiet"]


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


def one_error_line(result, needle: str) -> None:
    """Exactly one line of error output, naming the problem; no traceback."""
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = [x for x in result.output.splitlines() if x.strip()]
    errors = [x for x in lines if x.startswith("Error:")]
    assert len(errors) == 1, result.output
    assert needle in errors[0], errors[0]
    assert "Traceback" not in result.output


def _model_with_dim(path: Path, op: str = "Relu", elem=None) -> str:
    import onnx
    from onnx import TensorProto, helper

    elem = TensorProto.FLOAT if elem is None else elem
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", elem, ["batch", 4])],
        [helper.make_tensor_value_info("y", elem, ["batch", 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.save(model, path)
    return str(path)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["run", "--case", "relu_d100_w9x"], "relu_d100_w9x"),
        (["run", "--grid", "defualt"], "default"),
        (["run", "--case", "relu_d1_w8", "--arm", "plugin:/nope/libx.so"], "/nope/libx.so"),
        (["run", "--case", "relu_d1_w8", "--arm", "plugin:not_a_module_xyz"], "not_a_module_xyz"),
        (["run", "--case", "relu_d1_w8", "--arm", "warp"], "unknown arm"),
        (["run", "--case", "relu_d1_w8", "--dim", "batch"], "NAME=VALUE"),
        (["cases", "list", "--grid", "nope"], "nope"),
    ],
)
def test_user_mistakes_exit_1_with_one_line(args, needle) -> None:
    result = invoke(*args)
    assert result.exit_code == EXIT_USER_ERROR, result.output
    one_error_line(result, needle)


def test_rounds_zero_is_a_usage_error() -> None:
    result = invoke("run", "--case", "relu_d1_w8", "--rounds", "0")
    assert result.exit_code == EXIT_USAGE
    assert "--rounds" in result.output


def test_missing_symbolic_dim_names_it(tmp_path) -> None:
    path = _model_with_dim(tmp_path / "m.onnx")
    result = invoke("run", "--model", path, "--out", str(tmp_path / "o"), *FAST)
    assert result.exit_code == EXIT_USER_ERROR
    one_error_line(result, "batch")


def test_model_failing_the_checker(tmp_path) -> None:
    path = _model_with_dim(tmp_path / "bad.onnx", op="NoSuchOp")
    result = invoke("run", "--model", path, "--dim", "batch=1", *FAST)
    assert result.exit_code == EXIT_USER_ERROR
    one_error_line(result, "bad.onnx")


def test_unsupported_input_type(tmp_path) -> None:
    from onnx import TensorProto

    path = _model_with_dim(tmp_path / "s.onnx", op="Identity", elem=TensorProto.STRING)
    result = invoke("run", "--model", path, "--dim", "batch=1", *FAST)
    assert result.exit_code == EXIT_USER_ERROR
    one_error_line(result, "x")


def test_library_that_is_not_loadable(tmp_path) -> None:
    fake = tmp_path / "libfake.so"
    fake.write_text("not an ELF file")
    result = invoke("run", "--case", "relu_d1_w8", "--arm", f"plugin:{fake}",
                    "--out", str(tmp_path / "o"), *FAST)
    assert result.exit_code == EXIT_USER_ERROR
    one_error_line(result, str(fake))


def test_library_that_is_not_a_plugin_ep(tmp_path) -> None:
    import ctypes.util

    libz = ctypes.util.find_library("z")
    if libz is None:
        pytest.skip("no libz on this machine to stand in for a non-EP library")
    path = next(Path(p) / libz for p in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
                                         "/lib64", "/usr/lib") if (Path(p) / libz).exists())
    result = invoke("run", "--case", "relu_d1_w8", "--arm", f"plugin:{path}",
                    "--out", str(tmp_path / "o"), *FAST)
    assert result.exit_code == EXIT_USER_ERROR
    one_error_line(result, "not an ONNX Runtime plugin EP")


def test_unwritable_output_directory(tmp_path) -> None:
    blocker = tmp_path / "f"
    blocker.write_text("")
    result = invoke("run", "--case", "relu_d1_w8", "--out", str(blocker / "sub"), *FAST)
    assert result.exit_code == EXIT_USER_ERROR
    one_error_line(result, "choose another --out")


def test_existing_results_are_not_overwritten(tmp_path) -> None:
    (tmp_path / "results.json").write_text("{}")
    result = invoke("run", "--case", "relu_d1_w8", "--out", str(tmp_path), *FAST)
    assert result.exit_code == EXIT_USER_ERROR
    one_error_line(result, "--overwrite")
    assert (tmp_path / "results.json").read_text() == "{}"


def test_gate_exit_code_follows_the_reading(monkeypatch) -> None:
    from epbench.cli import run_commands
    from epbench.harness import gate

    busy = gate.GateReading(passed=False, idle={"cpu0": 0.2}, steal={"cpu0": 0.0},
                            waited_s=0.0, attempts=1, threshold=0.93)
    monkeypatch.setattr(run_commands, "current_gate_state", lambda threshold: busy)
    result = invoke("gate")
    assert result.exit_code == EXIT_GATE
    quiet = gate.GateReading(passed=True, idle={"cpu0": 0.99}, steal={"cpu0": 0.0},
                             waited_s=0.0, attempts=1, threshold=0.93)
    monkeypatch.setattr(run_commands, "current_gate_state", lambda threshold: quiet)
    assert invoke("gate").exit_code == 0


def test_host_json_has_a_key() -> None:
    result = invoke("host", "--format", "json")
    assert result.exit_code == 0
    assert len(json.loads(result.output)["key"]) >= 8


def test_help_documents_every_exit_code() -> None:
    result = invoke("--help")
    lines = [" ".join(line.split()) for line in result.output.splitlines()]
    for code, what in EXIT_CODES.items():
        assert f"{code} {what}" in lines


def test_readme_exit_code_table_matches_the_code() -> None:
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    for code, what in EXIT_CODES.items():
        assert f"| {code} | {what} |" in readme


def test_cases_list_reads_as_a_table_not_a_data_dump() -> None:
    import re

    listed = invoke("cases", "list", "--grid", "quick")
    assert listed.exit_code == 0
    lines = listed.output.splitlines()
    assert lines[0].split() == ["name", "kind", "op", "family", "nodes", "inputs", "tolerance",
                                "opt", "definition"]
    matmul = next(line for line in lines if line.startswith("matmul_64x64 "))
    assert matmul.split()[3] == "-"  # no family: a dash, not NaN
    assert "a:float32[1,64] b:float32[64,64]" in matmul
    assert "NaN" not in listed.output and "{'" not in listed.output
    assert not re.search(r"[0-9a-f]{13,}", listed.output)  # hashes cut to 12 digits
    from epbench.cases.grids import load_grid

    assert len(lines) == 1 + len(load_grid("quick"))


def test_cases_list_and_build(tmp_path) -> None:
    listed = invoke("cases", "list", "--grid", "quick", "--format", "json")
    assert listed.exit_code == 0
    names = [row["name"] for row in json.loads(listed.output)]
    from epbench.cases.grids import load_grid

    assert names == [c.name for c in load_grid("quick")]
    built = invoke("cases", "build", "--grid", "quick", "--out", str(tmp_path))
    assert built.exit_code == 0, built.output
    assert sorted(p.name for p in tmp_path.glob("*.onnx")) == sorted(f"{n}.onnx" for n in names)


@pytest.mark.slow
def test_end_to_end_run_against_a_real_plugin_ep(tmp_path) -> None:
    """The issue's example run, shortened; a real subprocess with an empty stderr."""
    pytest.importorskip("nxrt_ep_cpu")
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "epbench.cli.main", "run", "--grid", "quick", "--arm", "ort",
         "--arm", "plugin:nxrt_ep_cpu", "--out", str(out), *FAST[:-1], "--quiet",
         "--processes", "2", "--sessions", "2"],
        capture_output=True, text=True, cwd=Path(__file__).parent.parent, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    from epbench.cases.grids import load_grid
    from epbench.core.results import load_results, validate_schema

    doc = load_results(out / "results.json").to_dict()
    validate_schema(doc)
    quick = load_grid("quick")
    assert sorted(doc["cases"]) == sorted(c.name for c in quick)
    for spec in quick:
        case = doc["cases"][spec.name]
        assert case["status"] == "ok", case["error"]
        assert case["definition_sha256"] == spec.definition_sha256
        for key in ("ort", "plugin:nxrt_ep_cpu"):
            assert case["arms"][key]["verified"] is True
            assert case["arms"][key]["nodes_executed"] == spec.build().n_nodes
        # 2 rounds (one design of 2 arms) in each of 2 processes, sessions rotated.
        assert [(r["process"], r["session"]) for r in case["rounds"]] == [
            (0, 0), (0, 1), (1, 0), (1, 1)]
        for rnd in case["rounds"]:
            assert sorted(rnd["order"]) == ["ort", "plugin:nxrt_ep_cpu"]
            assert rnd["summary_ns"]["ort"]["n"] >= 1
    assert (out / "report.md").is_file()
    stream = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert [x["type"] for x in stream] == ["header"] + ["process"] * 2 * len(quick) + ["end"]
    assert doc["interrupted"] is False and stream[-1]["interrupted"] is False
    from epbench.harness.arms import file_sha256

    plugin = doc["arms"]["plugin:nxrt_ep_cpu"]
    assert plugin["sha256"] == file_sha256(plugin["library"])
    assert plugin["ep_name"] == "cpu_ep"
    summary = subprocess.run(
        [sys.executable, "-m", "epbench.cli.main", "summary", str(out / "results.json"),
         "--format", "json"], capture_output=True, text=True, timeout=120,
        cwd=Path(__file__).parent.parent,
    )
    data = json.loads(summary.stdout)
    arm = data["cases"]["relu_d10_w8"]["arms"]["plugin:nxrt_ep_cpu"]
    assert set(arm) >= {"p50_ns", "ratio_vs_ort", "ci95", "nodes_executed"}
    assert data["cases"]["relu_d10_w8"]["verified"] is True


@pytest.mark.parametrize(
    ("dims", "needle"),
    [(["batch=0"], "positive integer"), (["batch=²"], "positive integer"),
     (["batch=-1"], "positive integer"), (["batch=1", "batch=2"], "given twice"),
     (["batch=1", "bacth=2"], "bacth is not a symbolic dim"),
     (["batch=100000000000"], "smaller --dim")],
)
def test_dim_mistakes(tmp_path, dims, needle) -> None:
    path = _model_with_dim(tmp_path / "m.onnx")
    args = [x for d in dims for x in ("--dim", d)]
    result = invoke("run", "--model", path, *args, "--out", str(tmp_path / "o"), *FAST)
    assert result.exit_code == EXIT_USER_ERROR, result.output
    one_error_line(result, needle)


def test_two_models_with_one_name_are_refused(tmp_path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = _model_with_dim(tmp_path / "a" / "m.onnx")
    second = _model_with_dim(tmp_path / "b" / "m.onnx", op="Sigmoid")
    result = invoke("run", "--model", first, "--model", second, "--dim", "batch=1", *FAST)
    assert result.exit_code == EXIT_USER_ERROR
    one_error_line(result, "both named 'model:m'")


@pytest.mark.parametrize(
    ("arms", "needle"),
    [(["engine:foo=bar"], "no option 'foo'"),
     (["engine:name=a.b", "engine:name=a_b"], "would both register as 'a_b'"),
     (["plugin:json.nope"], "importing 'json.nope' failed")],
)
def test_arm_mistakes_found_before_any_case(tmp_path, arms, needle) -> None:
    args = [x for a in arms for x in ("--arm", a)]
    result = invoke("run", "--case", "relu_d1_w8", *args, "--out", str(tmp_path / "o"), *FAST)
    assert result.exit_code == EXIT_USER_ERROR, result.output
    one_error_line(result, needle)
    assert not (tmp_path / "o").exists()


def test_gate_threshold_zero_is_a_usage_error() -> None:
    assert invoke("run", "--gate-threshold", "0").exit_code == EXIT_USAGE
    assert invoke("gate", "--threshold", "0").exit_code == EXIT_USAGE


def test_readme_quotes_the_statistical_defaults_as_the_code_has_them() -> None:
    from epbench.reports import defaults

    readme = " ".join((Path(__file__).parent.parent / "README.md").read_text().split())
    documented = defaults.documented()
    for option in ("--confidence", "--floor", "--k", "--fdr", "--repeats"):
        assert f"`{option}` {documented[option]}" in readme, option
    assert f"{defaults.RESAMPLES} resamples" in readme
    assert f"(default `{defaults.FAIL_ON}`)" in readme
    assert f"noise is taken as {documented['no-profile noise']}" in readme
    assert f"at least {documented['alert']}" in readme
    from epbench.workflows.compare_commits import DEFAULT_TARGET_S_PER_CASE, REPORT_RESERVE_S

    assert (f"`--budget` seconds last (default: until {DEFAULT_TARGET_S_PER_CASE:g} s per case "
            f"after the command began, builds included, less {REPORT_RESERVE_S:g} s for the "
            "reports: 3 minutes in all for the quick grid, 10 for the default one,") in readme


def test_instructions_method_unavailable_is_one_line(tmp_path) -> None:
    from epbench.harness.instructions import perf_available

    ok, _ = perf_available()
    if ok:
        pytest.skip("this machine has hardware counters: nothing to refuse")
    result = invoke("run", "--case", "relu_d1_w8", "--instructions", "perf",
                    "--out", str(tmp_path / "o"), *FAST)
    assert result.exit_code == EXIT_USER_ERROR
    one_error_line(result, "--instructions valgrind")
    assert invoke("run", "--instructions", "cycles").exit_code == EXIT_USAGE


def test_a_piped_stderr_gets_one_progress_line_per_process(tmp_path) -> None:
    """In a CI log (stderr not a terminal) each finished process prints one line."""
    proc = subprocess.run(
        [sys.executable, "-m", "epbench.cli.main", "run", "--case", "relu_d1_w8",
         "--case", "relu_d10_w8", "--arm", "ort:name=ort_b", "--processes", "2",
         "--sessions", "1", "--out", str(tmp_path / "out"), *FAST[:-1]],
        capture_output=True, text=True, cwd=Path(__file__).parent.parent, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    pattern = (r"\[(\d+)/8 rounds, \d+ s\] (relu_d1_w8|relu_d10_w8) process ([12]): "
               r"2 rounds; ort_b \d+\.\d{3}x")
    matches = [re.fullmatch(pattern, line) for line in lines]
    assert all(matches), lines
    # Process 1 of both cases, then process 2 of both: interleaved in time.
    assert [(m.group(2), m.group(3)) for m in matches] == [
        ("relu_d1_w8", "1"), ("relu_d10_w8", "1"), ("relu_d1_w8", "2"), ("relu_d10_w8", "2")]
    assert [int(m.group(1)) for m in matches] == [2, 4, 6, 8]


def test_a_damaged_run_document_is_named_by_its_file_not_its_directory(tmp_path, monkeypatch):
    """The runner types the document it wrote to results.json: a key a writer lost is
    reported against that file (a directory is not something to open and look at)."""
    from epbench.harness import runner

    merge = runner.merge_process

    def losing_the_status(case, *args, **kwargs):
        merge(case, *args, **kwargs)
        del case["status"]

    monkeypatch.setattr(runner, "merge_process", losing_the_status)
    out = tmp_path / "out"
    one_error_line(invoke("run", "--case", "relu_d1_w8", "--processes", "1", "--out", str(out),
                          *FAST),
                   f"{out / 'results.json'}: cases.relu_d1_w8.status: missing;")


def test_line_progress_counts_each_run_anew() -> None:
    """compare-commits' re-runs reuse the progress object: "[8/8 rounds]", not "[16/8]"."""
    import io

    from epbench.cli.progress import LineProgress

    stream = io.StringIO()
    progress = LineProgress(stream, clock=lambda: 0.0)
    record = {"status": "ok", "processes": [{"rounds": 8}], "rounds": []}
    for total in (8, 8):
        progress.start(total)
        for _ in range(8):
            progress.event("relu_d1_w8", 0, {"event": "round"})
        progress.process_done("relu_d1_w8", 0, record, 0)
    assert [line.split("]")[0] for line in stream.getvalue().splitlines()] == [
        "[8/8 rounds, 0 s", "[8/8 rounds, 0 s"]


def test_a_library_that_loads_alone_but_not_twice_is_one_line_naming_the_twin(
        tmp_path, monkeypatch) -> None:
    """The probe loads every arm in one throw-away worker: a library that loads alone but
    fails beside its twin's copy is named as such, with the way round it, before anything
    runs; one that fails alone keeps its own error (it is not the twin's fault)."""
    from epbench.core.errors import ArmError
    from epbench.harness import runner
    from epbench.harness.arms import TWIN_SUFFIX, WITHOUT_TWIN

    probed: list[list[str]] = []

    def probe(arms, libraries, silence_timeout_s=None):
        keys = [a.key for a in arms]
        probed.append(keys)
        if any(k.endswith(TWIN_SUFFIX) for k in keys):
            raise ArmError("the EP refused a second registration")
        return {}  # the library alone loads (the runner only asks which arm failed)

    monkeypatch.setattr(runner, "probe_arms", probe)
    out = tmp_path / "out"
    result = invoke("run", "--case", "relu_d1_w8", "--arm", "engine", "--aa-twin", "engine",
                    "--out", str(out), *FAST)
    assert result.exit_code == EXIT_USER_ERROR
    one_error_line(result, "the A/A twin of 'engine' could not be loaded beside it (the EP "
                           "refused a second registration); the library cannot be loaded "
                           f"twice in one process: {WITHOUT_TWIN}")
    # Probed with the twin, then without it to tell which failed; nothing measured or written.
    assert [set(keys) for keys in probed] == [{"engine", "ort", "engine_twin"}, {"engine", "ort"}]
    assert not (out / "results.json").exists()

    def probe_alone_fails(arms, libraries, silence_timeout_s=None):
        raise ArmError("cannot load libepbench_engine.so: bad ELF")

    monkeypatch.setattr(runner, "probe_arms", probe_alone_fails)
    result = invoke("run", "--case", "relu_d1_w8", "--arm", "engine", "--aa-twin", "engine",
                    "--out", str(tmp_path / "out2"), *FAST)
    assert result.exit_code == EXIT_USER_ERROR
    one_error_line(result, "cannot load libepbench_engine.so: bad ELF")
    assert "twice" not in result.output


def test_run_twins_its_first_arm_by_default_once_two_arms_are_compared(tmp_path) -> None:
    """Two or more arms beside the control: the first one gets its A/A twin unasked, so
    `compare` has the run's own noise; one arm, or --no-aa-twin, runs none."""
    import json

    def twin_of(*args: str) -> tuple[dict | None, list[str]]:
        out = tmp_path / f"out{len(list(tmp_path.iterdir()))}"
        result = invoke("run", "--case", "relu_d1_w8", *args, "--processes", "1",
                        "--out", str(out), *FAST)
        assert result.exit_code == 0, result.output
        doc = json.loads((out / "results.json").read_text())
        return doc["twin"], sorted(doc["arms"])

    # Both arms load one file: the twin registers that file again, not a copy.
    assert twin_of("--arm", "engine", "--arm", "engine:partition=per_node") == (
        {"of": "engine", "key": "engine_twin", "shared_library": True},
        ["engine", "engine:partition=per_node", "engine_twin", "ort"])
    assert twin_of("--arm", "engine") == (None, ["engine", "ort"])
    # Asked for beside one arm: a copy (it stands for another build's file).
    assert twin_of("--arm", "engine", "--aa-twin", "engine")[0] == {
        "of": "engine", "key": "engine_twin", "shared_library": False}
    # Named by its spec: recorded by its key; ORT's CPU EP loads no file to share.
    assert twin_of("--arm", "engine", "--arm", "engine:partition=per_node,name=pn",
                   "--aa-twin", "engine:partition=per_node,name=pn")[0] == {
        "of": "pn", "key": "pn_twin", "shared_library": True}
    assert twin_of("--arm", "engine", "--aa-twin", "ort")[0] == {
        "of": "ort", "key": "ort_twin", "shared_library": False}
    assert twin_of("--arm", "engine", "--arm", "engine:partition=per_node",
                   "--no-aa-twin")[0] is None
    result = invoke("run", "--case", "relu_d1_w8", "--arm", "engine", "--aa-twin", "engine",
                    "--no-aa-twin", "--out", str(tmp_path / "both"), *FAST)
    one_error_line(result, "--aa-twin ARM and --no-aa-twin contradict each other")


def test_a_default_twin_that_cannot_load_is_dropped_with_a_note(tmp_path, monkeypatch) -> None:
    """The default twin was not asked for: a library that refuses a second load runs
    without it (the progress line says so) instead of failing the run."""
    from epbench.core.errors import ArmError
    from epbench.harness import runner
    from epbench.harness.arms import TWIN_SUFFIX

    real_probe = runner.probe_arms

    def probe(arms, libraries, silence_timeout_s=None):
        if any(a.key.endswith(TWIN_SUFFIX) for a in arms):
            raise ArmError("the EP refused a second registration")
        return real_probe(arms, libraries, silence_timeout_s)

    monkeypatch.setattr(runner, "probe_arms", probe)
    out = tmp_path / "out"
    args = ["run", "--case", "relu_d1_w8", "--arm", "engine", "--arm",
            "engine:partition=per_node", "--processes", "1", "--out", str(out), *FAST]
    result = invoke(*[a for a in args if a != "--quiet"])
    assert result.exit_code == 0, result.output
    assert ("no A/A twin: 'engine' cannot be loaded twice in one process (the EP refused a "
            "second registration)") in result.output
    import json
    doc = json.loads((out / "results.json").read_text())
    assert doc["twin"] is None
    assert sorted(doc["arms"]) == ["engine", "engine:partition=per_node", "ort"]


def test_the_default_twin_is_of_the_first_arm_with_a_library() -> None:
    """An `ort` arm under another name has no library to copy: the default twin skips it."""
    from epbench.harness.arms import default_twin, parse_arm

    arms = [parse_arm("ort:name=cpu2"), parse_arm("engine"),
            parse_arm("engine:partition=per_node")]
    assert default_twin(arms) == "engine"
    assert default_twin(arms[:2]) is None  # one arm with a library: nothing to compare


def test_a_run_comparing_arms_gets_more_processes_and_rounds(monkeypatch) -> None:
    """Two or more arms besides ort: the defaults a same-run verdict needs (8 processes,
    48 rounds); otherwise run's own; a value given always wins."""
    from epbench.cli import run_commands
    from epbench.core.errors import EpbenchError
    from epbench.harness.run_config import COMPARED_PROCESSES, COMPARED_ROUNDS, RunConfig

    sized: list[tuple[int, int]] = []

    def stop(config):
        sized.append((config.rounds, config.processes))
        raise EpbenchError("stopped before running")

    monkeypatch.setattr(run_commands, "run_grid", stop)
    for args in (["--arm", "engine", "--arm", "plugin:nxrt_ep_cpu"],
                 ["--arm", "engine", "--arm", "engine:partition=per_node", "--no-aa-twin"],
                 ["--arm", "engine"], ["--arm", "ort:name=cpu2", "--arm", "engine"],
                 ["--arm", "engine", "--arm", "plugin:nxrt_ep_cpu", "--processes", "2"],
                 ["--arm", "engine", "--rounds", "7"]):
        result = invoke("run", "--case", "relu_d1_w8", *args)
        assert result.exit_code == EXIT_USER_ERROR, result.output
    compared = (COMPARED_ROUNDS, COMPARED_PROCESSES)
    alone = (RunConfig.rounds, RunConfig.processes)
    assert compared[0] != alone[0] and compared[1] != alone[1]
    assert sized == [compared, compared, alone, alone, (COMPARED_ROUNDS, 2),
                     (7, RunConfig.processes)]


def test_the_twin_shares_a_file_only_when_every_arm_loads_it() -> None:
    from epbench.harness.arms import parse_arm, shares_one_library, with_control

    arms = with_control([parse_arm("engine"), parse_arm("engine:partition=per_node"),
                         parse_arm("plugin:other")])
    one = {"ort": None, "engine": "/l/a.so", "engine:partition=per_node": "/l/./a.so",
           "plugin:other": "/l/a.so"}
    assert shares_one_library(arms, one)  # one file, named two ways
    assert not shares_one_library(arms, {**one, "plugin:other": "/l/b.so"})
    assert not shares_one_library(arms[:2], one)  # one arm with a library: nothing compared
    assert not shares_one_library(arms, dict.fromkeys(one))  # no file at all: nothing shared
