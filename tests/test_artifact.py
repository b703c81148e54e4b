"""The comment job's artifact reader: a bench run's artifact is data, checked before use.

Every refusal is checked through the command the workflow runs (`epbench comment
--from-artifact`), against the local stub of GitHub's REST API: one line of output,
exit 1, and not a single request to the stub (so no comment, and no PR lookup).
"""

from __future__ import annotations

import json
import os
import stat
import warnings
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from epbench.cli.comment_command import comment
from epbench.core.errors import EXIT_USER_ERROR
from epbench.reports import render
from epbench.reports.bot import artifact
from epbench.reports.bot.artifact import (
    COMPARE_FILE,
    MAX_BYTES,
    MAX_ENTRIES,
    PR_FILE,
    ArtifactError,
    check_comment_body,
    comparison_schema,
    read_artifact,
)
from epbench.reports.comparison import Comparison, Rerun
from epbench.reports.sticky import STICKY_MARKER
from tests.support.github_stub import HEAD_SHA, PR, REPO, TOKEN, StubGitHub, no_proxies, serve_stub
from tests.test_reports_render import _same_run, _separate, _verdicts


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubGitHub]:
    no_proxies(monkeypatch)
    with serve_stub() as state:
        yield state


@pytest.fixture(scope="module")
def comparison() -> dict[str, Any]:
    """A real comparison with every verdict, as compare-commits writes it (JSON round trip)."""
    return json.loads(_verdicts().to_json())


def write_artifact(folder: Path, comparison: Any, pr: Any = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    compare_text = comparison if isinstance(comparison, str) else render.to_json(comparison)
    (folder / COMPARE_FILE).write_text(compare_text, encoding="utf-8")
    (folder / PR_FILE).write_text(json.dumps({"number": PR} if pr is None else pr),
                                  encoding="utf-8")
    (folder / "report.md").write_text("# anything: the reader never reads it\n", encoding="utf-8")
    return folder


def zip_of(path: Path, members: Any, symlinks: tuple[str, ...] = ()) -> Path:
    items = members.items() if isinstance(members, dict) else members
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in items:
            archive.writestr(zipfile.ZipInfo(name), data)
        for name in symlinks:
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, "/etc/passwd")
    return path


def invoke(stub: StubGitHub, artifact_path: Path, *extra: str, head: str = HEAD_SHA):
    return CliRunner().invoke(
        comment,
        ["--from-artifact", str(artifact_path), "--repo", REPO, "--run-head-sha", head,
         "--api-url", stub.base, *extra],
        env={"GITHUB_TOKEN": TOKEN, "GITHUB_REPOSITORY": None, "GITHUB_API_URL": None},
    )


# -- the schema and the happy path ------------------------------------------------------


def _twinned() -> dict[str, Any]:
    from tests.test_comment_inert import _twin_comparison

    return _twin_comparison()


def _kept() -> Comparison:
    """Verdicts whose first case compare-commits re-ran on ❔, its first pass's figure kept."""
    made = _verdicts()
    return replace(made, reruns={made.cases[0].case: Rerun(reruns=1, rounds=10, kept=0.02)})


@pytest.mark.parametrize("make", [_separate, _same_run, _verdicts, _twinned, _kept])
def test_real_comparisons_match_the_schema(make: Callable[[], dict[str, Any]]) -> None:
    import jsonschema

    schema = comparison_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    made = make()
    doc = json.loads(made.to_json() if isinstance(made, Comparison) else render.to_json(made))
    assert doc["schema"] == schema["properties"]["schema"]["const"]
    jsonschema.Draft202012Validator(schema).validate(doc)


def test_a_good_artifact_is_posted_as_this_branch_renders_it(
    stub: StubGitHub, tmp_path: Path, comparison: dict[str, Any]
) -> None:
    folder = write_artifact(tmp_path / "bench-out", comparison)
    result = invoke(stub, folder)
    assert result.exit_code == 0, result.output
    # The PR is looked up first, then the comments, then the comment is created.
    assert [(r.method, r.path) for r in stub.requests] == [
        ("GET", f"/repos/{REPO}/pulls/{PR}"),
        ("GET", f"/repos/{REPO}/issues/{PR}/comments"),
        ("POST", f"/repos/{REPO}/issues/{PR}/comments"),
    ]
    (posted,) = stub.comments
    # Exactly what `compare --format markdown` (and report.md) renders from these verdicts.
    assert posted["body"] == render.render_markdown(Comparison.from_json(comparison))
    assert result.stdout.startswith(f"created the epbench comment on {REPO}#{PR}: https://")
    assert f"GitHub confirmed its head is {HEAD_SHA[:12]}" in result.stdout


def test_the_zip_github_serves_reads_the_same(tmp_path: Path, comparison: dict[str, Any]) -> None:
    folder = write_artifact(tmp_path / "bench-out", comparison)
    members = {p.name: p.read_bytes() for p in folder.iterdir()}
    from_zip = read_artifact(zip_of(tmp_path / "bench-out.zip", members))
    from_folder = read_artifact(folder)
    assert from_zip.comparison == from_folder.comparison == Comparison.from_json(comparison)
    assert from_zip.pr_number == from_folder.pr_number == PR


def test_emoji_and_headline_come_from_the_verdicts_not_the_artifact(
    stub: StubGitHub, tmp_path: Path, comparison: dict[str, Any]
) -> None:
    doc = json.loads(json.dumps(comparison))
    alert = next(r for r in doc["cases"] if r["verdict"] == "alert")
    alert["emoji"] = "✅"
    doc["overall"]["headline"] = "✅ No regression"
    result = invoke(stub, write_artifact(tmp_path / "a", doc))
    assert result.exit_code == 0, result.output
    body = stub.comments[0]["body"]
    assert f"| 🔴 | `{alert['case']}` |" in body
    assert f"| ✅ | `{alert['case']}` |" not in body
    assert body.splitlines()[1] == "## ❌ Failed · epbench"  # a ❌ case outranks the 🔴


def test_a_pr_whose_head_is_not_the_measured_commit_gets_no_comment(
    stub: StubGitHub, tmp_path: Path, comparison: dict[str, Any]
) -> None:
    # The artifact names PR 7; GitHub says PR 7's head is another commit (a forged
    # number, or a PR pushed to since): only the lookup is made, nothing is written.
    stub.head_sha = "d" * 40
    result = invoke(stub, write_artifact(tmp_path / "a", comparison))
    assert result.exit_code == EXIT_USER_ERROR
    assert len(result.output.splitlines()) == 1
    assert f"pull request #{PR} in {REPO} has head dddddddddddd" in result.output
    assert f"measured {HEAD_SHA[:12]}: not commenting" in result.output
    assert stub.methods() == ["GET"] and stub.requests[0].path == f"/repos/{REPO}/pulls/{PR}"
    assert stub.comments == []


# -- refusals: one line, exit 1, no request ---------------------------------------------


def _mutated(comparison: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> Any:
    doc = json.loads(json.dumps(comparison))
    change(doc)
    return doc


def _set_case_name(name: str) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        doc["cases"][0]["case"] = name

    return change


def _big_compare(folder: Path, comparison: Any) -> None:
    # Valid JSON, one byte over the limit (trailing whitespace).
    write_artifact(folder, comparison)
    data = render.to_json(comparison).encode("utf-8")
    (folder / COMPARE_FILE).write_bytes(data.ljust(MAX_BYTES[COMPARE_FILE] + 1))


def _big_pr_file(folder: Path, comparison: Any) -> None:
    write_artifact(folder, comparison, pr={"number": PR, "pad": "x" * MAX_BYTES[PR_FILE]})


def _symlinked_compare(folder: Path, comparison: Any) -> None:
    write_artifact(folder, comparison)
    (folder / "elsewhere.json").write_text(render.to_json(comparison), encoding="utf-8")
    (folder / COMPARE_FILE).unlink()
    os.symlink(folder / "elsewhere.json", folder / COMPARE_FILE)


def _symlink_beside(folder: Path, comparison: Any) -> None:
    write_artifact(folder, comparison)
    (folder / "logs").mkdir()
    os.symlink("/etc/passwd", folder / "logs" / "worker.log")


def _fifo_beside(folder: Path, comparison: Any) -> None:
    write_artifact(folder, comparison)
    os.mkfifo(folder / "pipe")


def _too_many_entries(folder: Path, comparison: Any) -> None:
    write_artifact(folder, comparison)
    for index in range(MAX_ENTRIES):
        (folder / f"f{index}").touch()


def _as_text(text: str) -> Callable[[Path, Any], None]:
    return lambda folder, comparison: write_artifact(folder, text)


def _as_bytes(data: bytes) -> Callable[[Path, Any], None]:
    def make(folder: Path, comparison: Any) -> None:
        write_artifact(folder, comparison)
        (folder / COMPARE_FILE).write_bytes(data)

    return make


def _with(change: Callable[[dict[str, Any]], None], pr: Any = None) -> Callable[[Path, Any], None]:
    return lambda folder, comparison: write_artifact(folder, _mutated(comparison, change), pr)


def _no_file(name: str) -> Callable[[Path, Any], None]:
    def make(folder: Path, comparison: Any) -> None:
        write_artifact(folder, comparison)
        (folder / name).unlink()

    return make


FOLDER_REFUSALS = {
    "compare.json too big": (
        _big_compare, f"compare.json is {MAX_BYTES[COMPARE_FILE] + 1} bytes, more than the "
        f"{MAX_BYTES[COMPARE_FILE]} allowed",
    ),
    "pull-request.json too big": (
        _big_pr_file, f"pull-request.json is 1048 bytes, more than the {MAX_BYTES[PR_FILE]}",
    ),
    "compare.json a symlink": (_symlinked_compare, "'compare.json' is a symbolic link"),
    "a symlink elsewhere": (_symlink_beside, "'logs/worker.log' is a symbolic link"),
    "a named pipe": (_fifo_beside, "'pipe' is not a regular file or folder"),
    "too many entries": (_too_many_entries, f"more than {MAX_ENTRIES} entries"),
    "no compare.json": (_no_file(COMPARE_FILE), "no compare.json in it"),
    "no pull-request.json": (_no_file(PR_FILE), "no pull-request.json in it"),
    "not JSON": (_as_text("{not json"), "compare.json is not valid JSON"),
    "NaN": (_as_text('{"schema": NaN}'), "compare.json at 'schema' holds 'NaN', which is not a "
            "finite number"),
    "a key twice": (_as_text('{"a": 1, "a": 2}'), "a key appears twice"),
    "nested too deep": (_as_text("[" * 100000 + "]" * 100000), "nested"),
    "not UTF-8": (_as_bytes(b'{"schema": "\xff"}'), "compare.json is not UTF-8"),
    "wrong schema version": (
        _with(lambda d: d.update(schema="epbench.comparison/2")),
        "does not match reports/comparison.schema.json at 'schema'",
    ),
    "unknown verdict": (
        _with(lambda d: d["cases"][0].update(verdict="fine")), "at 'cases/0/verdict'",
    ),
    "a required field missing": (_with(lambda d: d.pop("counts")), "'counts' is a required"),
    "a number that is a string": (
        _with(lambda d: d["cases"][0].update(change="+5%")), "at 'cases/0/change'",
    ),
    "a control shift that is not a number": (
        _with(lambda d: d["cases"][0].update(control_shift="x")), "at 'cases/0/control_shift'",
    ),
    "a backtick in a case name": (_with(_set_case_name("relu`<b>x</b>`")), "at 'cases/0/case'"),
    "a newline and a workflow command in a case name": (
        _with(_set_case_name("relu\n::error::forged")), "at 'cases/0/case'",
    ),
    "--> in a case name": (
        _with(_set_case_name("relu_d1_w8 -->")), "at 'cases[0].case' holds '-->'",
    ),
    "--> in a reason": (
        _with(lambda d: d["cases"][2].update(reason="fine --> <img src=x>")),
        "at 'cases[2].reason' holds '-->'",
    ),
    "<!-- in a warning": (
        _with(lambda d: d["warnings"].append("<!-- the rest is hidden")),
        "holds '<!--'",
    ),
    "--!> in what it cannot catch": (
        _with(lambda d: d["cannot_catch"].append("x --!> y")), "holds '--!>'",
    ),
    "--> in a host key": (
        _with(lambda d: d["host"].update({"cpu-->": "x"})), "at 'host.cpu-->' holds '-->'",
    ),
    "a bidi override in a reason": (
        _with(lambda d: d["cases"][0].update(reason="ok \u202e")), "U+202E",
    ),
    "PR number zero": (
        _with(lambda d: None, pr={"number": 0}), "pull-request.json does not match",
    ),
    "PR number a string": (
        _with(lambda d: None, pr={"number": "7"}), "pull-request.json does not match",
    ),
    "PR file with more": (
        _with(lambda d: None, pr={"number": 7, "body": "## hi"}), "pull-request.json does not",
    ),
}


@pytest.mark.parametrize("kind", list(FOLDER_REFUSALS))
def test_a_bad_artifact_folder_is_refused_in_one_line_before_any_request(
    stub: StubGitHub, tmp_path: Path, comparison: dict[str, Any], kind: str
) -> None:
    make, expected = FOLDER_REFUSALS[kind]
    folder = tmp_path / "bench-out"
    make(folder, comparison)
    result = invoke(stub, folder)
    assert result.exit_code == EXIT_USER_ERROR, result.output
    assert len(result.output.splitlines()) == 1, result.output
    assert result.output.startswith(f"Error: artifact {folder}: "), result.output
    assert expected in result.output
    assert "not commenting" in result.output
    assert stub.requests == [] and stub.comments == []


def _zip_members(comparison: Any, *extra: tuple[str, bytes]) -> list[tuple[str, bytes]]:
    good = [(COMPARE_FILE, render.to_json(comparison).encode()),
            (PR_FILE, json.dumps({"number": PR}).encode())]
    return good + list(extra)


ZIP_REFUSALS: dict[str, tuple[Callable[[Any], list[tuple[str, bytes]]], tuple[str, ...], str]] = {
    "a parent-folder member": (
        lambda c: _zip_members(c, ("../x", b"x")), (), "'../x' climbs out of the artifact",
    ),
    "a nested parent-folder member": (
        lambda c: _zip_members(c, ("a/../../x", b"x")), (), "climbs out of the artifact",
    ),
    "an absolute member": (
        lambda c: _zip_members(c, ("/etc/cron.d/x", b"x")), (),
        "'/etc/cron.d/x' is an absolute path",
    ),
    "a drive-letter member": (
        lambda c: _zip_members(c, ("C:/x", b"x")), (), "'C:/x' is an absolute path",
    ),
    "a backslash member": (
        lambda c: _zip_members(c, ("..\\x", b"x")), (), "has a NUL or backslash",
    ),
    "a symlink member": (
        lambda c: _zip_members(c)[1:], (COMPARE_FILE,), "'compare.json' is a symbolic link",
    ),
    "a member twice": (
        lambda c: _zip_members(c, (PR_FILE, b'{"number": 8}')), (),
        "'pull-request.json' appears twice",
    ),
    "a big member": (
        lambda c: [(COMPARE_FILE, b" " * (MAX_BYTES[COMPARE_FILE] + 1)), *_zip_members(c)[1:]],
        (), f"compare.json is {MAX_BYTES[COMPARE_FILE] + 1} bytes, more than the",
    ),
    "too many members": (
        lambda c: _zip_members(c, *((f"f{i}", b"") for i in range(MAX_ENTRIES))), (),
        f"more than {MAX_ENTRIES} entries",
    ),
}


@pytest.mark.parametrize("kind", list(ZIP_REFUSALS))
def test_a_bad_artifact_zip_is_refused_in_one_line_before_any_request(
    stub: StubGitHub, tmp_path: Path, comparison: dict[str, Any], kind: str
) -> None:
    members, links, expected = ZIP_REFUSALS[kind]
    archive = tmp_path / "bench-out.zip"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate it writes
        zip_of(archive, members(comparison), links)
    result = invoke(stub, archive)
    assert result.exit_code == EXIT_USER_ERROR, result.output
    assert len(result.output.splitlines()) == 1, result.output
    assert result.output.startswith(f"Error: artifact {archive}: "), result.output
    assert expected in result.output
    assert stub.requests == [] and stub.comments == []


def test_the_artifact_path_itself_must_not_be_a_link(
    stub: StubGitHub, tmp_path: Path, comparison: dict[str, Any]
) -> None:
    folder = write_artifact(tmp_path / "real", comparison)
    os.symlink(folder, tmp_path / "bench-out")
    result = invoke(stub, tmp_path / "bench-out")
    assert result.exit_code == EXIT_USER_ERROR
    assert "the artifact path itself is a symbolic link" in result.output
    assert len(result.output.splitlines()) == 1 and stub.requests == []


def test_a_body_with_any_other_html_comment_is_refused(
    stub: StubGitHub, tmp_path: Path, comparison: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The last line of defence, after the string checks: the rendered body itself.
    original = render.render_markdown
    monkeypatch.setattr(render, "render_markdown", lambda doc: original(doc) + "<!-- x -->\n")
    result = invoke(stub, write_artifact(tmp_path / "a", comparison))
    assert result.exit_code == EXIT_USER_ERROR
    assert "2 HTML comment opening(s) and 2 closing(s)" in result.output
    assert len(result.output.splitlines()) == 1 and stub.requests == []
    with pytest.raises(ArtifactError):
        check_comment_body("## no marker at all\n")
    check_comment_body(f"{STICKY_MARKER}\n## fine\n")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--pr", "7"], "drop --pr and --body"),
        (["--body", "x.md"], "drop --pr and --body"),
    ],
)
def test_from_artifact_takes_nothing_it_could_be_told_instead(
    stub: StubGitHub, tmp_path: Path, comparison: dict[str, Any], args: list[str], expected: str
) -> None:
    result = invoke(stub, write_artifact(tmp_path / "a", comparison), *args)
    assert result.exit_code == EXIT_USER_ERROR and expected in result.output
    assert stub.requests == []


def test_the_run_head_sha_is_required_and_must_be_a_sha(
    stub: StubGitHub, tmp_path: Path, comparison: dict[str, Any]
) -> None:
    folder = write_artifact(tmp_path / "a", comparison)
    missing = CliRunner().invoke(
        comment, ["--from-artifact", str(folder), "--repo", REPO, "--api-url", stub.base],
        env={"GITHUB_TOKEN": TOKEN},
    )
    assert missing.exit_code == EXIT_USER_ERROR
    assert "--from-artifact needs --run-head-sha" in missing.output
    short = invoke(stub, folder, head="abc123")
    assert short.exit_code == EXIT_USER_ERROR
    assert "--run-head-sha 'abc123' is not a full commit sha" in short.output
    assert stub.requests == []


def test_a_missing_artifact_says_what_to_pass(stub: StubGitHub, tmp_path: Path) -> None:
    result = invoke(stub, tmp_path / "nope")
    assert result.exit_code == EXIT_USER_ERROR
    assert "no artifact at" in result.output and "actions/download-artifact" in result.output
    assert stub.requests == []


def test_the_reader_reads_only_the_files_it_names(
    tmp_path: Path, comparison: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = write_artifact(tmp_path / "a", comparison)
    (folder / "results.json").write_text("x" * (MAX_BYTES[COMPARE_FILE] + 1), encoding="utf-8")
    opened: list[str] = []
    real_open = os.open

    def spy(path: Any, *args: Any, **kwargs: Any) -> int:
        opened.append(Path(path).name)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(artifact.os, "open", spy)
    assert read_artifact(folder).pr_number == PR
    assert sorted(opened) == [COMPARE_FILE, PR_FILE]


def test_a_file_longer_than_its_stated_size_is_still_cut_off() -> None:
    # A zip header or a file that grew after it was measured: the read itself is bounded.
    limit = MAX_BYTES[COMPARE_FILE]
    asked: list[int] = []

    def read(size: int) -> bytes:
        asked.append(size)
        return b" " * size

    with pytest.raises(ArtifactError, match=f"compare.json is more than the {limit} bytes"):
        artifact._bounded_read(read, 10, COMPARE_FILE, "bench-out")
    assert asked == [limit + 1]


def test_a_pr_number_that_is_no_pull_request_gets_no_comment(
    stub: StubGitHub, tmp_path: Path, comparison: dict[str, Any]
) -> None:
    result = invoke(stub, write_artifact(tmp_path / "a", comparison, pr={"number": 99}))
    assert result.exit_code == EXIT_USER_ERROR
    assert len(result.output.splitlines()) == 1
    assert f"GitHub found no pull request #99 in {REPO} (404 Not Found)" in result.output
    assert [(r.method, r.path) for r in stub.requests] == [("GET", f"/repos/{REPO}/pulls/99")]
    assert stub.comments == []


def test_the_comment_points_at_the_html_report_in_the_artifact(comparison):
    typed = Comparison.from_json(comparison)
    plain = artifact.comment_body(typed)
    linked = artifact.comment_body(typed, "https://github.example/run/7")
    assert "report.html" not in plain
    assert linked.startswith(plain.rstrip("\n"))
    assert linked.endswith("`report.html` in the run's artifact, https://github.example/run/7\n")
