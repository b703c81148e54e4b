"""A grid split over a runner matrix: `run --shard K/N`, `merge`, and the history."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from epbench.cases.grids import load_grid
from epbench.cases.shards import parse_shard, shard_cases
from epbench.cli.main import cli
from epbench.core.errors import EpbenchError

FAST = ["--rounds", "2", "--processes", "1", "--block-ms", "0.2", "--max-block-iters", "10",
        "--warmup-ms", "1", "--gate", "off", "--quiet"]


@pytest.mark.parametrize("count", [1, 2, 3, 4])
def test_the_shards_partition_the_grid_and_keep_each_family_whole(count: int) -> None:
    cases = load_grid("default")
    shards = [shard_cases(cases, k, count) for k in range(1, count + 1)]
    names = [c.name for shard in shards for c in shard]
    assert sorted(names) == sorted(c.name for c in cases)  # every case once
    for family in {c.family for c in cases if c.family}:
        holders = [i for i, shard in enumerate(shards) if any(c.family == family for c in shard)]
        assert len(holders) == 1, family
    assert shards == [shard_cases(cases, k, count) for k in range(1, count + 1)]
    sizes = sorted(len(s) for s in shards)
    largest_family = max(sum(c.family == f for c in cases) for f in {c.family for c in cases})
    assert sizes[-1] - sizes[0] <= largest_family


@pytest.mark.parametrize("text", ["0/3", "4/3", "3", "a/b", "1/0", "-1/2"])
def test_a_bad_shard_is_one_line_with_the_form_to_write(text: str) -> None:
    with pytest.raises(EpbenchError, match=r"write K/N with 1 <= K <= N"):
        parse_shard(text)


def _run(out, *args):
    result = CliRunner().invoke(cli, ["run", *FAST, *args, "--out", str(out)])  # args win
    assert result.exit_code == 0, result.output
    return json.loads((out / "results.json").read_text())


@pytest.mark.slow
@pytest.mark.serial  # two real runs of one commit must not differ: no load between
def test_three_shards_run_merge_and_enter_the_history_as_one_run(tmp_path) -> None:
    runner = CliRunner()
    # 8 rounds: enough for an exact interval of the median, so the cases can be compared.
    docs = [_run(tmp_path / f"s{k}", "--grid", "quick", "--arm", "engine", "--shard", f"{k}/3",
                 "--rounds", "8") for k in (1, 2, 3)]
    assert [d["config"]["shard"] for d in docs] == ["1/3", "2/3", "3/3"]
    assert all("ort" in case["arms"] for d in docs for case in d["cases"].values())
    merged_dir = tmp_path / "all"
    merged = runner.invoke(cli, ["merge", *(str(tmp_path / f"s{k}" / "results.json")
                                            for k in (1, 2, 3)), "--out", str(merged_dir)])
    assert merged.exit_code == 0, merged.output
    doc = json.loads((merged_dir / "results.json").read_text())
    assert sorted(doc["cases"]) == sorted(c.name for c in load_grid("quick"))
    assert [s["shard"] for s in doc["shards"]] == ["1/3", "2/3", "3/3"]
    assert "merge_forced" not in doc
    # The merged file is a results file like any other.
    assert runner.invoke(cli, ["compare", str(merged_dir / "results.json"), "--base", "ort",
                               "--pr", "engine", "--fail-on", "never"]).exit_code == 0
    # Against an unsharded run of the same commit: every case is compared, none flagged.
    _run(tmp_path / "whole", "--grid", "quick", "--arm", "engine", "--rounds", "8")
    against = runner.invoke(cli, ["compare", str(tmp_path / "whole" / "results.json"),
                                  str(merged_dir / "results.json"), "--arm", "engine",
                                  "--fail-on", "regression", "--format", "json"])
    assert against.exit_code == 0, against.output
    rows = json.loads(against.output)["cases"]
    assert sorted(r["case"] for r in rows) == sorted(c.name for c in load_grid("quick"))
    assert {r["verdict"] for r in rows} <= {"no_change", "inconclusive"}, against.output
    db = tmp_path / "h.sqlite"
    added = runner.invoke(cli, ["history", "add", str(merged_dir / "results.json"), "--db",
                                str(db), "--commit", "abc1234", "--machine-class", "x86"])
    assert added.exit_code == 0, added.output
    listed = json.loads(runner.invoke(cli, ["history", "list", "--db", str(db), "--format",
                                            "json"]).output)
    assert len(listed["runs"]) == 1
    assert listed["runs"][0]["points"] == 2 * len(load_grid("quick"))
    # A shard merged twice, and shards of different runs, are refused in one line.
    twice = runner.invoke(cli, ["merge", str(tmp_path / "s1" / "results.json"),
                                str(tmp_path / "s1" / "results.json"), "--out",
                                str(tmp_path / "twice")])
    assert twice.exit_code == 1 and "is in both" in twice.output
    other = _run(tmp_path / "s2b", "--grid", "quick", "--arm", "engine", "--shard", "2/3",
                 "--rounds", "8", "--seed", "7")
    assert other["config"]["seed"] == 7
    pair = [str(tmp_path / "s1" / "results.json"), str(tmp_path / "s2b" / "results.json")]
    refused = runner.invoke(cli, ["merge", *pair, "--out", str(tmp_path / "mixed")])
    assert refused.exit_code == 1
    seed = docs[0]["config"]["seed"]
    assert f"config seed {seed} vs 7" in refused.output and "--force" in refused.output
    assert not (tmp_path / "mixed" / "results.json").exists()
    forced = runner.invoke(cli, ["merge", *pair, "--force", "--out", str(tmp_path / "mixed")])
    assert forced.exit_code == 0, forced.output
    recorded = json.loads((tmp_path / "mixed" / "results.json").read_text())["merge_forced"]
    assert recorded == [f"{pair[1]}: config seed {seed} vs 7", "shard(s) 3/3 missing"]


def test_merging_shards_with_one_missing_names_it(tmp_path) -> None:
    from epbench.core.model import Results
    from epbench.harness.merge import MergeError, Shard, merge_shards
    from tests.support.synthetic import results_doc

    def shard(k: int, case: str) -> Shard:
        doc = results_doc({case: {"ort": 400.0, "engine": 150.0}}, rounds=4, seed=1)
        doc["config"]["shard"] = f"{k}/3"
        return Shard(f"s{k}.json", Results.from_dict(doc, source=f"s{k}.json"))

    two = [shard(1, "relu_d1_w8"), shard(2, "relu_d10_w8")]
    with pytest.raises(MergeError, match=r"shard\(s\) 3/3 of this grid are missing"):
        merge_shards(two)
    forced = merge_shards(two, force=True)
    assert "shard(s) 3/3 missing" in forced.extra["merge_forced"]
    assert sorted(merge_shards([*two, shard(3, "add_d10_w8")]).cases) == [
        "add_d10_w8", "relu_d10_w8", "relu_d1_w8"]


def test_a_merged_run_is_written_in_the_shards_own_format() -> None:
    from epbench.core.model import Results
    from epbench.harness.merge import Shard, merge_shards
    from tests.support.synthetic import results_doc

    docs = []
    for k, case in enumerate(("relu_d1_w8", "relu_d10_w8"), start=1):
        doc = results_doc({case: {"ort": 400.0, "engine": 150.0}}, rounds=4, seed=1)
        doc["config"]["shard"] = f"{k}/2"
        doc["created"] = f"2026-01-0{3 - k}T00:00:00Z"
        docs.append(doc)
    docs[1]["interrupted"] = True
    merged = merge_shards([Shard(f"s{k}.json", Results.from_dict(d))
                           for k, d in enumerate(docs, start=1)]).to_dict()
    # The first shard's document but for what a merge says of the whole run.
    first = {k: v for k, v in docs[0].items() if k not in ("cases", "config")}
    assert {k: v for k, v in merged.items() if k not in ("cases", "config", "shards")} == {
        **first, "interrupted": True, "created": "2026-01-01T00:00:00Z"}
    assert merged["config"] == {**docs[0]["config"], "shard": None,
                                "case_names": ["relu_d1_w8", "relu_d10_w8"]}
    assert merged["cases"] == {**docs[0]["cases"], **docs[1]["cases"]}
    assert merged["shards"] == [
        {"source": "s1.json", "shard": "1/2", "machine": "host0001",
         "created": "2026-01-02T00:00:00Z", "cases": ["relu_d1_w8"]},
        {"source": "s2.json", "shard": "2/2", "machine": "host0001",
         "created": "2026-01-01T00:00:00Z", "cases": ["relu_d10_w8"]}]


def _slice(k: int, case: str, **change: object):
    """Slice k/2 as a runner matrix measures it: its library in a folder of its own, on a
    runner of its own; ``change`` edits the document further (dotted keys)."""
    from epbench.core.model import Results
    from epbench.harness.merge import Shard
    from tests.support.synthetic import results_doc

    doc = results_doc({case: {"ort": 400.0, "engine": 150.0}}, rounds=4, seed=1)
    doc["config"]["shard"] = f"{k}/2"
    doc["extra"] = {"epbench_version": "1.0"}
    doc["host"]["key"] = f"host000{k}"
    doc["host"]["cpu_model"] = f"CPU {k}"
    library = f"/tmp/slice{k}/libengine.so"
    doc["arms"]["engine"].update(spec=f"plugin:{library}:name=engine", library=library,
                                 sha256=f"{k}" * 64)
    for dotted, value in change.items():
        *path, last = dotted.split(".")
        target = doc
        for key in path:
            target = target[key]
        target[last] = value
    doc = {**{k: v for k, v in doc.items() if k != "extra"}, **doc["extra"]}
    return Shard(f"s{k}.json", Results.from_dict(doc, source=f"s{k}.json"))


def test_a_matrix_join_tolerates_only_library_paths_and_the_host() -> None:
    from epbench.harness.merge import MergeError, merge_shards, merge_warnings

    pair = [_slice(1, "relu_d1_w8"), _slice(2, "relu_d10_w8")]
    with pytest.raises(MergeError, match="machine host0001 vs host0002; the arms' library paths"):
        merge_shards(pair)
    merged = merge_shards(pair, allow_paths_and_host=True)
    assert merged.extra["merge_forced"] == [
        "s2.json: machine host0001 vs host0002", "s2.json: the arms' library paths",
        "s2.json: the library bytes (sha256) of engine"]
    (line,) = merge_warnings(merged)
    # The paths differ in every matrix: recorded, not shown; the bytes and host are shown.
    assert line == ("the shards were joined despite 2 difference(s) between them "
                    "(s2.json: machine host0001 vs host0002; s2.json: the library bytes "
                    "(sha256) of engine): their results file lists each under merge_forced")
    alike = _slice(2, "relu_d10_w8", **{"host.key": "host0001",
                                        "arms.engine.spec": pair[0].results.arms["engine"].spec,
                                        "arms.engine.sha256": "1" * 64})
    assert merge_warnings(merge_shards([pair[0], alike])) == []  # joined as measured: no line
    moved = _slice(2, "relu_d10_w8", **{"host.key": "host0001", "arms.engine.sha256": "1" * 64})
    joined = merge_shards([pair[0], moved], allow_paths_and_host=True)
    assert joined.extra["merge_forced"] == ["s2.json: the arms' library paths"]
    assert merge_warnings(joined) == []
    other_ep = "plugin:/tmp/slice2/libengine.so:k=v,name=engine"
    for change, says in (
        ({"config.seed": 7}, "config seed 1 vs 7"),
        ({"extra.epbench_version": "1.1"}, "epbench 1.0 vs 1.1"),
        ({"arms.engine.spec": other_ep, "arms.engine.options": {"k": "v"}}, "arms "),
        ({"arms.engine.kind": "engine",
          "arms.engine.spec": "engine@/tmp/slice2/libengine.so:name=engine"}, "arms "),
        ({"arms.engine.spec": "plugin:onnxruntime_other:name=engine"}, "arms "),
        ({"twin": {"of": "engine", "key": "engine_twin"}}, "the control or the A/A twin"),
    ):
        odd = [_slice(1, "relu_d1_w8"), _slice(2, "relu_d10_w8", **change)]
        with pytest.raises(MergeError, match=says):
            merge_shards(odd, allow_paths_and_host=True)
        forced = merge_shards(odd, force=True)  # `epbench merge --force`, as before
        assert any(says in f for f in forced.extra["merge_forced"]), change
