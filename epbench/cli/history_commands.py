"""Thin click commands for the results history: `epbench history add|import|list|...`.

Each parses its options, opens the store (reports.history.store), calls one library
function and prints; errors are EpbenchError subclasses shown by click as one line.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from epbench.cli.base import Group, emit
from epbench.cli.options import case_option, format_option, out_option
from epbench.core.errors import EXIT_OK, EXIT_REGRESSION, EpbenchError
from epbench.core.gitcmd import git_argv, git_env
from epbench.core.paths import DB_ENV
from epbench.reports.defaults import HISTORY_INSTRUCTIONS_CHANGE
from epbench.reports.history import changepoints, documents
from epbench.reports.history.changes import (
    Finding,
    all_points_frame,
    match_commit,
    series_with_changes,
)
from epbench.reports.history.changes import detect as detect_changes  # `detect` is the command
from epbench.reports.history.db import HistoryError
from epbench.reports.history.instruction_series import (
    InstructionFinding,
    instruction_changes,
    instruction_series,
)
from epbench.reports.history.store import DEFAULT_DB_NAME, HistoryStore, add_file, import_dir

FORMATS = ("text", "json", "csv")
FAIL_ON = ("regression", "any", "never")
SHORT_SHA = 7


def db_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--db", "db_url", metavar="URL", default=None,
        help=f"History database: a SQLite path (or sqlite:///PATH), or "
             f"postgresql://user:password@host/db (postgres://, postgresql+psycopg://) "
             f"[default: ${DB_ENV}, else <epbench cache>/{DEFAULT_DB_NAME}].",
    )(f)


def _short(sha: str) -> str:
    return sha[:SHORT_SHA]


def _git(repo: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(git_argv(repo, *args), capture_output=True, text=True,
                              timeout=10, check=False, env=git_env())
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:+.1f}"


@click.group(cls=Group)
def history() -> None:
    """Keep every run in a history store and find the commits that changed a case.

    \b
    The series tracked is each arm's ratio to the in-run ORT control, per case
    and machine (or machine class), in commit order. Stores: SQLite by default
    (no server), PostgreSQL for a team (--db postgresql://...).
    """


@history.command("add")
@click.argument("results", type=click.Path())
@click.option("--commit", metavar="SHA", help="The commit measured [default: the one the "
              "results file recorded (the checkout epbench ran in)].")
@click.option("--branch", metavar="NAME", help="The branch it is on (results files record none).")
@click.option("--machine-class", metavar="NAME",
              help="Put this run in the series of a machine class rather than of its own host.")
@db_option
def add(results: str, commit: str | None, branch: str | None, machine_class: str | None,
        db_url: str | None) -> None:
    """Add one results file to the history (a run already stored is stored once)."""
    with HistoryStore.open(db_url) as store:
        done = add_file(store, results, commit=commit, branch=branch,
                             machine_class=machine_class)
        where = store.url
    if done.added:
        click.echo(f"added run {done.run_id}: commit {_short(done.commit)}"
                   f"{'' if done.branch is None else ' on ' + done.branch}, "
                   f"{done.points} case x arm points, to {where}")
    else:
        click.echo(f"already stored as run {done.run_id} (commit {_short(done.commit)}); "
                   "nothing added")
    if done.added and done.branch is None:
        click.echo("note: no branch recorded; pass --branch NAME to record one", err=True)


@history.command("import")
@click.argument("directory", type=click.Path())
@click.option("--branch", metavar="NAME", help="The branch the runs are on.")
@click.option("--machine-class", metavar="NAME", help="Group the runs' machines under NAME.")
@db_option
def import_(directory: str, branch: str | None, machine_class: str | None,
            db_url: str | None) -> None:
    """Add every results file under a directory, oldest run first."""
    with HistoryStore.open(db_url) as store:
        done = import_dir(store, directory, branch=branch, machine_class=machine_class)
    added = sum(r.added for _, r in done)
    for path, r in done:
        state = f"added as run {r.run_id}" if r.added else f"already stored (run {r.run_id})"
        click.echo(f"{path}: commit {_short(r.commit)}, {state}")
    click.echo(f"{added} run(s) added, {len(done) - added} already stored")


@history.command("migrate")
@db_option
def migrate(db_url: str | None) -> None:
    """Create or upgrade the store's schema in place (safe to run again).

    \b
    Run it once when a team's PostgreSQL server is set up, and after upgrading
    epbench; every other history command also upgrades a store it opens.
    """
    with HistoryStore.open(db_url, migrate=False) as store:
        before, after = store.migrate()
        where = store.url
    if before == after:
        click.echo(f"{where} is at schema version {after}; nothing to do")
    else:
        click.echo(f"upgraded {where} from schema version {before} to {after}")


@history.command("list")
@click.option("--series", "show_series", is_flag=True, help="List the series instead of runs.")
@format_option(*FORMATS)
@out_option(directory=False, help_text="Write the list to this file instead of stdout.")
@db_option
def list_(show_series: bool, fmt: str, out: str | None, db_url: str | None) -> None:
    """List the stored runs (or, with --series, the series).

    `--format json` follows reports/history/history_list.schema.json.
    """
    with HistoryStore.open(db_url) as store:
        doc = (documents.series_list_document(store) if show_series
               else documents.runs_document(store))
    rows = doc["series"] if show_series else doc["runs"]
    if fmt == "json":
        emit(json.dumps(doc, sort_keys=True, indent=1) + "\n", out)
    elif fmt == "csv":
        emit(_csv(rows, list(rows[0]) if rows else []), out)
    elif show_series:
        emit("".join(f"{r['case']:<24} {r['arm']:<16} {r['machine']:<18} "
                     f"{r['commits']} commit(s)\n" for r in rows)
             + f"{len(rows)} series in {doc['db']}\n", out)
    else:
        emit("".join(f"{r['id']:>5}  {_short(r['commit'])}  {r['branch'] or '-':<12} "
                     f"{r['created']}  {r['machine_class'] or r['machine']:<18} "
                     f"{r['points']} points\n" for r in rows)
             + f"{len(rows)} run(s) in {doc['db']} (schema version "
             f"{doc['db_schema_version']})\n", out)


@history.command("show")
@click.option("--case", "case_name", required=True, metavar="CASE")
@click.option("--arm", required=True, metavar="ARM")
@click.option("--machine", metavar="KEY", help="Machine key or class (needed when the case "
              "has several).")
@format_option(*FORMATS)
@out_option(directory=False, help_text="Write the series to this file instead of stdout.")
@db_option
def show(case_name: str, arm: str, machine: str | None, fmt: str, out: str | None,
         db_url: str | None) -> None:
    """Show one series, a commit per line, and its change points.

    `--format json` follows reports/history/history_series.schema.json.
    """
    with HistoryStore.open(db_url) as store:
        result = series_with_changes(store, case_name, arm, machine)
        counted = instruction_series(store, case_name, arm, result.machine)
    moved = instruction_changes(counted, case=case_name, arm=arm, machine=result.machine)
    doc = documents.series_document(case_name, arm, result, counted, moved)
    if fmt == "json":
        emit(json.dumps(doc, sort_keys=True, indent=1) + "\n", out)
        return
    if fmt == "csv":
        emit(_csv(doc["points"], ["commit", "created", "ratio", "lo", "hi", "runs",
                                  "change_point"] + (["instructions", "instructions_change"]
                                                     if counted else [])), out)
        return
    lines = [f"{case_name}, {arm} on {result.machine}: ratio to the in-run ORT control"
             + (", and instructions per Run" if counted else "")]
    for p in doc["points"]:
        ci = "" if p["lo"] is None or p["hi"] is None else f" [{p['lo']:.3f}, {p['hi']:.3f}]"
        mark = ("" if p["change_point"] is None
                else f"   <- change {_pct(p['change_point'])} %")
        if p.get("instructions_change") is not None:
            mark += f"   <- instructions {p['instructions_change'] * 100:+.2f} %"
        instr = "" if not counted else (
            f"  {'-' if p['instructions'] is None else format(p['instructions'], ',.0f'):>10}"
            " instr")
        lines.append(f"  {_short(p['commit'])}  {p['created']}  {p['ratio']:.3f}{ci}{instr}  "
                     f"({p['runs']} run{'s' if p['runs'] > 1 else ''}){mark}")
    if len(result.points) < changepoints.MIN_POINTS:
        lines.append(f"  ({len(result.points)} commits; change points need "
                     f"{changepoints.MIN_POINTS})")
    emit("\n".join(lines) + "\n", out)


def _resolve_since(store: HistoryStore, since: str, repo: Path) -> str:
    commits = store.commits()
    if match_commit(commits, since):
        return since
    sha = _git(repo, "rev-parse", "--verify", "--quiet", f"{since}^{{commit}}")
    if sha and match_commit(commits, sha):
        return sha
    raise HistoryError(
        f"--since {since!r}: unknown revision (no stored run has it"
        f"{'' if sha is None else ', and git resolves it to an unmeasured commit'}); "
        "`epbench history list` shows the stored commits"
    )


def _finding_line(f: Finding) -> str:
    between = "" if f.commits_between is None else f" ({f.commits_between} commits)"
    ci = ("" if f.change.lo != f.change.lo  # NaN: a side too short for an exact interval
          else f" [{_pct(f.change.lo - 1.0)}, {_pct(f.change.hi - 1.0)}]")
    return (f"`{f.case}`, {f.arm}: {_pct(f.change.ratio - 1.0)} %{ci} between "
            f"`{_short(f.before)}` and `{_short(f.after)}`{between}")


def _instruction_line(f: InstructionFinding) -> str:
    return (f"`{f.case}`, {f.arm}: instructions per Run {f.old:,.0f} -> {f.new:,.0f} "
            f"({f.change * 100:+.2f} %) between `{_short(f.before)}` and `{_short(f.after)}`"
            f", machine {f.machine}")


def _csv(rows: list[dict[str, Any]], columns: list[str]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


@history.command("detect")
@case_option
@click.option("--arm", "arms", multiple=True, metavar="ARM", help="Only this arm. Repeatable.")
@click.option("--machine", "machines", multiple=True, metavar="KEY",
              help="Only this machine key or class. Repeatable.")
@click.option("--since", metavar="REV", help="Report change points from this commit on "
              "(a stored sha or prefix, or a git revision of --repo).")
@click.option("--repo", type=click.Path(file_okay=False), default=".", show_default=True,
              help="The git repository used to resolve --since and count commits in a range.")
@click.option("--weighted", is_flag=True,
              help="Weigh each point by 1 / its interval's width^2 (off: it lowered "
                   "detection on synthetic series, see docs/history.md).")
@format_option(*FORMATS)
@click.option("--fail-on", type=click.Choice(FAIL_ON), default="regression", show_default=True,
              help="Exit 5 when a change point is a regression, any change point, or never.")
@db_option
def detect(case_names: tuple[str, ...], arms: tuple[str, ...], machines: tuple[str, ...],
           since: str | None, repo: str, weighted: bool, fmt: str, fail_on: str,
           db_url: str | None) -> None:
    """Find change points in each series, in commit order, and name the commits around them.

    \b
    Method: e-divisive with means (Matteson & James 2014) on log(ratio to the
    in-run ORT control), each split tested by permutation (p <= 0.01, 199
    shuffles, at least 4 commits a side). A change is the
    median level after over the median before, with a distribution-free interval.
    Instructions per Run, where runs counted them: a change point at each commit
    whose count moved more than 0.1 % from the level held (counts are exact);
    only --fail-on any fails on them.
    Exit codes: 0 nothing matched --fail-on, 5 a change point did, 1 bad input.
    """
    repo_path = Path(repo)
    with HistoryStore.open(db_url) as store:
        since_sha = None if since is None else _resolve_since(store, since, repo_path)
        found = detect_changes(store, cases=case_names, arms=arms, machines=machines,
                               since=since_sha, weighted=weighted)
    if found.tested == 0 and found.instruction_series == 0:
        raise HistoryError(found.too_short[0] if len(found.too_short) == 1 else
                                f"{len(found.too_short)} series, none long enough to test "
                                f"(a test needs {changepoints.MIN_POINTS} commits); "
                                "add more runs")
    findings = []
    for f in found.findings:
        count = _git(repo_path, "rev-list", "--count", f"{f.before}..{f.after}")
        findings.append(f if count is None else replace(f, commits_between=int(count)))
    if fmt == "json":
        click.echo(json.dumps({"tested": found.tested, "too_short": found.too_short,
                               "findings": [f.to_dict() for f in findings],
                               "instruction_series": found.instruction_series,
                               "instruction_findings": [
                                   f.to_dict() for f in found.instruction_findings]},
                              sort_keys=True, indent=1))
    elif fmt == "csv":
        columns = ["case", "arm", "machine", "direction", "change", "lo", "hi", "p", "before",
                   "after", "commits_between", "counters_changed"]
        rows = [{**f.to_dict(), "counters_changed": json.dumps(f.to_dict()["counters_changed"])}
                for f in findings]
        click.echo(_csv(rows, columns), nl=False)
    else:
        for f in findings:
            click.echo(_finding_line(f))
            click.echo(f"    {'regression' if f.regression else 'improvement'}, "
                       f"p = {f.p:.3f}, machine {f.machine}")
            if f.counters_changed:
                changed = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in f.counters_changed.items())
                click.echo(f"    counters changed: {changed}")
        for g in found.instruction_findings:
            click.echo(_instruction_line(g))
        scope = "" if since is None else f" since {since}"
        click.echo(f"{len(findings)} change point(s){scope} in {found.tested} series tested")
        if found.instruction_series:
            click.echo(f"{len(found.instruction_findings)} instruction change(s){scope} in "
                       f"{found.instruction_series} instruction series (a move of more than "
                       f"{HISTORY_INSTRUCTIONS_CHANGE * 100:g} % from the level held)")
        for line in found.too_short:
            click.echo(f"note: not tested: {line}", err=True)
    hits = [f for f in findings if fail_on == "any" or (fail_on == "regression" and f.regression)]
    # An instruction count alone never fails a job on `regression` (as in compare, where
    # it is a mark, never a 🔴): only `any` counts its changes.
    hits += found.instruction_findings if fail_on == "any" else []
    click.get_current_context().exit(EXIT_REGRESSION if hits else EXIT_OK)


@history.command("export")
@out_option(directory=False, required=True, help_text="The file to write.")
@format_option("csv", "parquet", default="csv")
@db_option
def export(out: str, fmt: str, db_url: str | None) -> None:
    """Export every stored point (run x case x arm) as CSV or Parquet."""
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401 -- only to say clearly that it is missing
        except ImportError:
            raise EpbenchError("--format parquet needs pyarrow, which is not installed; "
                               "`pip install pyarrow`, or use --format csv") from None
    with HistoryStore.open(db_url) as store:
        frame = all_points_frame(store)
    try:
        if fmt == "parquet":
            frame.to_parquet(out, index=False)
        else:
            frame.to_csv(out, index=False)
    except OSError as exc:
        raise EpbenchError(f"cannot write {out}: {exc.strerror}; choose another path") from None
    click.echo(f"wrote {len(frame)} rows to {out}")
