"""The `compare`, `calibrate` and `export` commands through click, with exit codes.

Calibration runs against a fake runner (synthetic A/A documents), never real sessions.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from epbench.cli.main import cli
from epbench.core.errors import EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, EXIT_USER_ERROR
from epbench.core.model import Results
from epbench.core.results import load_results
from epbench.harness.arms import parse_arm
from epbench.reports import calibrate
from epbench.workflows import calibrate as calibration
from tests.support import synthetic
from tests.support.synthetic import as_results

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "results"


@pytest.fixture()
def files(tmp_path):
    for name in ("base.json", "pr.json", "same_run.json", "profile.json"):
        shutil.copy(FIXTURES / name, tmp_path / name)
    return tmp_path


def _invoke(*args, env=None):
    result = CliRunner().invoke(cli, [str(a) for a in args], env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


def test_compare_two_runs_exit_code_follows_fail_on(files):
    args = ["compare", files / "base.json", files / "pr.json", "--profile", files / "profile.json"]
    result = _invoke(*args)
    assert result.exit_code == EXIT_REGRESSION
    # A crashed PR case outranks the alert in the headline; the sentence counts both.
    assert "❌ Failed" in result.output and "relu_d100_w8" in result.output
    assert "1 of 4 cases got slower" in result.output
    assert _invoke(*args, "--fail-on", "never").exit_code == EXIT_OK


def test_compare_same_run_fail_on_regression_and_json(files):
    result = _invoke("compare", files / "same_run.json", "--base", "base", "--pr", "pr",
                     "--profile", files / "profile.json", "--format", "json", "--fail-on", "never")
    assert result.exit_code == EXIT_OK
    doc = json.loads(result.output)
    assert doc["mode"] == "same-run" and doc["overall"]["key"] == "alert"


def test_compare_markdown_to_a_file(files):
    out = files / "comment.md"
    result = _invoke("compare", files / "base.json", files / "pr.json", "--profile",
                     files / "profile.json", "--format", "markdown", "--out", out,
                     "--fail-on", "never")
    assert result.exit_code == EXIT_OK
    assert out.read_text(encoding="utf-8").startswith("<!-- epbench:sticky-comment -->")


def test_compare_without_a_profile_uses_the_host_cache(files, tmp_path):
    cache = tmp_path / "cache"
    (cache / "epbench" / "profiles").mkdir(parents=True)
    shutil.copy(files / "profile.json", cache / "epbench" / "profiles" / "host0001.json")
    result = _invoke("compare", files / "base.json", files / "pr.json", "--format", "json",
                     "--fail-on", "never", env={"XDG_CACHE_HOME": str(cache)})
    assert json.loads(result.output)["profile"]["host_key"] == "host0001"
    result = _invoke("compare", files / "base.json", files / "pr.json", "--format", "json",
                     "--fail-on", "never", env={"XDG_CACHE_HOME": str(tmp_path / "empty")})
    assert json.loads(result.output)["profile"] is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{d}/same_run.json"], "needs both arms"),
        (["{d}/same_run.json", "--base", "base", "--pr", "nope"], "arm 'nope' is not in"),
        (["{d}/missing.json", "{d}/pr.json"], "no results file"),
        (["{d}/base.json", "{d}/pr.json", "{d}/pr.json"], "one results file"),
        (["{d}/base.json", "{d}/pr.json", "--arm", "x", "--base", "y"], "either --arm"),
        (["{d}/base.json", "{d}/pr.json", "--profile", "{d}/nope.json"], "no noise profile"),
        (["{d}/base.json", "{d}/other_host.json"], "different hosts"),
        (["{d}/base.json", "{d}/newer.json"], "newer than this epbench"),
        (["{d}/base.json", "{d}/pr.json", "--arm", "nope"], "pass --arm with one of"),
    ],
)
def test_compare_refusals_are_one_line_exit_1(files, args, message):
    other = json.loads((files / "pr.json").read_text())
    other["host"]["key"] = "elsewhere"
    (files / "other_host.json").write_text(json.dumps(other))
    newer = json.loads((files / "pr.json").read_text())
    newer["schema"] = "epbench.results/99"
    (files / "newer.json").write_text(json.dumps(newer))
    result = _invoke("compare", *[a.format(d=files) for a in args])
    assert result.exit_code == EXIT_USER_ERROR
    assert message in result.output
    assert "Traceback" not in result.output


def test_export_pyperf_works_with_pyperf_compare_to(files):
    out = files / "out.json"
    result = _invoke("export", files / "base.json", "--out", out)  # pyperf: the default
    assert result.exit_code == EXIT_OK, result.output
    ort, ep = files / "out.ort.json", files / "out.plugin_ep.json"
    assert ort.is_file() and ep.is_file()
    compared = subprocess.run(
        [sys.executable, "-m", "pyperf", "compare_to", str(ort), str(ep), "--table"],
        capture_output=True, text=True, check=False,
    )
    assert compared.returncode == 0, compared.stderr
    assert compared.stderr == ""
    assert "relu_d100_w8" in compared.stdout and "faster" in compared.stdout
    # Never overwrite silently.
    again = _invoke("export", files / "base.json", "--format", "pyperf", "--out", out)
    assert again.exit_code == EXIT_USER_ERROR and "--overwrite" in again.output


def test_export_pyperf_values_are_round_medians_in_seconds(files):
    import pyperf

    from epbench.reports import export, stats

    doc = load_results(files / "base.json")
    paths = export.to_pyperf(as_results(doc), files / "x.json")
    suite = pyperf.BenchmarkSuite.load(str(paths["plugin:ep"]))
    bench = suite.get_benchmark("relu_d10_w8")
    expected = stats.round_medians(as_results(doc).cases["relu_d10_w8"], "plugin:ep") / 1e9
    assert bench.get_nrun() == len(expected)
    assert bench.get_values() == pytest.approx(list(expected), rel=1e-12)


def test_export_csv_is_tidy(files):
    import pandas as pd

    out = files / "rounds.csv"
    result = _invoke("export", files / "base.json", "--format", "csv", "--out", out)
    assert result.exit_code == EXIT_OK
    frame = pd.read_csv(out)
    # 5 cases x 2 arms x 20 rounds, one row each.
    assert len(frame) == 5 * 2 * 20
    assert list(frame.columns[:8]) == ["case", "arm", "round", "process", "session", "position",
                                       "quiet", "median_ns"]
    assert set(frame["position"]) == {0, 1}


def test_export_creates_the_folder_it_writes_into(files):
    import pandas as pd

    out = files / "new" / "deeper" / "rounds.csv"
    result = _invoke("export", files / "base.json", "--format", "csv", "--out", out)
    assert result.exit_code == EXIT_OK, result.output
    assert len(pd.read_csv(out)) == 5 * 2 * 20
    suite = files / "more" / "out.json"
    assert _invoke("export", files / "base.json", "--out", suite).exit_code == EXIT_OK
    assert sorted(p.name for p in suite.parent.iterdir()) == ["out.ort.json",
                                                              "out.plugin_ep.json"]


def test_export_csv_to_stdout_with_a_dash_writes_no_file(files, monkeypatch):
    monkeypatch.chdir(files)
    result = _invoke("export", files / "base.json", "--format", "csv", "--out", "-")
    assert result.exit_code == EXIT_OK
    lines = result.output.splitlines()
    assert lines[0].startswith("case,arm,round,")
    assert len(lines) == 1 + 5 * 2 * 20
    assert not (files / "-").exists()
    refused = _invoke("export", files / "base.json", "--out", "-")
    assert refused.exit_code == EXIT_USER_ERROR
    assert "cannot go to standard output" in refused.output
    assert not (files / "-").exists()


def test_export_that_cannot_write_names_the_reason_not_none(files):
    blocker = files / "blocker"
    blocker.write_text("a file where a folder should be")
    result = _invoke("export", files / "base.json", "--format", "csv", "--out",
                     blocker / "rounds.csv")
    assert result.exit_code == EXIT_USER_ERROR
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "None" not in errors[0] and str(blocker) in errors[0]


def test_export_needs_a_target(files):
    result = _invoke("export", files / "base.json")
    assert result.exit_code == EXIT_USAGE and "Missing option '--out'" in result.output


# --------------------------------------------------------------------------- calibrate


class FakeRunner:
    """Returns a synthetic A/A document per RunConfig; a fixed order makes the second arm
    3 % slower, as a position effect would, which counterbalancing must cancel."""

    def __init__(self):
        self.configs = []

    def __call__(self, config):
        self.configs.append(config)
        keys = [a.key for a in config.arms]
        if "ort" not in keys:
            keys = ["ort", *keys]
        second = 1.03 if config.fixed_order else 1.0
        cases = {
            spec.name: {k: 1000.0 * (second if k == keys[-1] else 1.0) for k in keys}
            for spec in config.cases
        }
        noise = synthetic.NoiseModel(machine_sigma=0.01, arm_sigma=0.005, spike_prob=0.0,
                                       session_sigma=0.0)
        return Results.from_dict(synthetic.results_doc(cases, rounds=config.rounds,
                                                       seed=config.seed, noise=noise))


def test_calibrate_runs_aa_repeats_then_the_fixed_order_self_test():
    from epbench.cases.grids import case_by_name

    fake = FakeRunner()
    specs = [case_by_name("relu_d1_w8"), case_by_name("relu_d10_w8")]
    profile = calibration.calibrate(specs, repeats=4, rounds=12, run=fake)
    assert [c.fixed_order for c in fake.configs] == [False] * 4 + [True]
    assert [c.seed for c in fake.configs] == [0, 1, 2, 3, 4]
    assert [a.key for a in fake.configs[0].arms] == ["ort", "ort_b"]
    # The worker re-parses arm specs: the A/A names must survive that.
    assert [parse_arm(a.spec).key for a in fake.configs[0].arms] == ["ort", "ort_b"]
    assert all(c.rounds == 12 and c.out_dir is None for c in fake.configs)
    assert profile["schema"] == calibrate.PROFILE_SCHEMA
    assert profile["host_key"] == "host0001" and profile["repeats"] == 4
    entry = profile["cases"]["relu_d1_w8"]
    assert len(entry["same-run"]["changes"]) == 4
    assert len(entry["separate-runs"]["changes"]) == 6  # every pair of 4 repeats
    assert entry["same-run"]["noise"] == max(
        entry["same-run"]["p95_abs"], entry["same-run"]["ci_half_width"]
    )
    # The self-test sees the 3 % position effect that counterbalancing removed.
    bias = profile["position_bias"]
    assert bias["median_abs_fixed_order"] == pytest.approx(0.03, abs=0.006)
    assert bias["median_abs_counterbalanced"] < 0.006


def test_calibrate_a_plugin_arm_uses_two_names_of_it():
    from epbench.cases.grids import case_by_name

    fake = FakeRunner()
    calibration.calibrate([case_by_name("relu_d1_w8")], arm="plugin:/x/libep.so", repeats=1,
                        rounds=6, position_test=False, run=fake)
    arms = fake.configs[0].arms
    assert [parse_arm(a.spec).key for a in arms] == ["aa_a", "aa_b"]
    assert {a.target for a in arms} == {"/x/libep.so"}
    assert calibration.aa_arms("engine:partition=per_node")[1].spec == (
        "engine:partition=per_node,name=aa_b"
    )
    assert dict(calibration.aa_arms("engine:partition=per_node")[1].options) == {
        "partition": "per_node"
    }


def test_calibrate_refuses_runs_where_no_case_ran():
    from epbench.cases.grids import case_by_name

    def failing(config):
        doc = FakeRunner()(config).to_dict()
        for case in doc["cases"].values():
            case.update(status="failed", error="KeyError: 'ort_b'", rounds=[])
        return Results.from_dict(doc)

    with pytest.raises(calibrate.ProfileError, match="no case ran.*KeyError"):
        calibration.calibrate([case_by_name("relu_d1_w8")], repeats=1, run=failing)


def test_calibrate_refuses_zero_repeats():
    with pytest.raises(calibrate.ProfileError, match="at least 1"):
        calibration.calibrate([], repeats=0, run=FakeRunner())


def test_calibrate_command_writes_the_profile_to_the_cache(monkeypatch, tmp_path):
    import epbench.harness.runner

    fake = FakeRunner()
    monkeypatch.setattr(epbench.harness.runner, "run", fake)
    result = _invoke("calibrate", "--case", "relu_d1_w8", "--repeats", "2", "--rounds", "8",
                     "--quiet", "--gate", "off", env={"XDG_CACHE_HOME": str(tmp_path)})
    assert result.exit_code == EXIT_OK, result.output
    path = tmp_path / "epbench" / "profiles" / "host0001.json"
    profile = calibrate.load_profile(path)
    assert set(profile["cases"]) == {"relu_d1_w8"}
    assert "position-bias self-test" in result.output
    explicit = tmp_path / "mine.json"
    result = _invoke("calibrate", "--case", "relu_d1_w8", "--repeats", "1", "--rounds", "8",
                     "--no-position-test", "--quiet", "--profile", explicit)
    assert result.exit_code == EXIT_OK and explicit.is_file()
    assert len(fake.configs) == 3 + 1
    # --gate reaches every run, the position test's too; the run's default otherwise.
    assert [c.gate_policy for c in fake.configs] == ["off"] * 3 + ["wait"]


def test_load_profile_refusals(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(calibrate.ProfileError, match="not valid JSON"):
        calibrate.load_profile(bad)
    bad.write_text(json.dumps({"schema": "epbench.results/1"}))
    with pytest.raises(calibrate.ProfileError, match="not an epbench noise profile"):
        calibrate.load_profile(bad)
    bad.write_text(json.dumps({"schema": "epbench.noise-profile/9"}))
    with pytest.raises(calibrate.ProfileError, match="newer than this epbench"):
        calibrate.load_profile(bad)


def test_one_repeat_estimates_the_two_run_noise():
    from epbench.cases.grids import case_by_name

    profile = calibration.calibrate([case_by_name("relu_d1_w8")], repeats=1, rounds=10,
                                  position_test=False, run=FakeRunner())
    entry = profile["cases"]["relu_d1_w8"]
    assert entry["separate-runs"]["estimated"] is True
    assert entry["separate-runs"]["noise"] == pytest.approx(entry["same-run"]["noise"] * 2**0.5)


def test_comparing_a_file_with_itself_warns(files):
    result = _invoke("compare", files / "base.json", files / "base.json",
                     "--profile", files / "profile.json")
    assert "base and PR are the same results" in result.output
    result = _invoke("compare", files / "base.json", files / "pr.json",
                     "--profile", files / "profile.json")
    assert "same results" not in result.output
