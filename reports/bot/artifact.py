"""A bench run's artifact, read strictly as data by the job that holds the write token.

The bench workflow loads the pull request's EP library into the measuring process,
so every file it uploads may have been written by the PR. The comment job reads two
small files from the artifact, never executes anything from it, renders the comment
with its own (the default branch's) templates, and refuses, each with one line and
before any request to GitHub:

- an entry that is not a plain file or folder (a symlink, a device, a pipe), or, in
  a zip, a member name that leaves the artifact (`../x`, `/etc/x`, `C:x`, `a\\b`);
- more than MAX_ENTRIES entries, or a file it reads that is larger than its limit;
- a compare.json that is not strict JSON (a key twice, nesting too deep), that
  holds a number that is not finite (NaN, Infinity, or one too large for a float,
  such as 1e400), each named by the key that holds it, or that does not match
  reports/comparison.schema.json, which lists every key (an unknown one is refused)
  and bounds every string;
- any string, value or key, that could open or close an HTML comment (`<!--`, `-->`,
  `--!>`): it would end the hidden sticky marker early, or hide what follows it;
  or that holds a control or format character other than newline and tab (a bidi
  override can make a line read other than it is);
- a pull-request.json that does not hold one positive PR number.

What it returns is only data: the comment renders every string of it through
reports.render.inert (one code span each), so none can mention, link or break out.
The PR number it returns is a claim: `comment_from_artifact` posts only after GitHub
confirms that this PR's head commit is the commit the bench run measured.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import unicodedata
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from epbench.core.errors import EpbenchError
from epbench.reports import render
from epbench.reports.bot.github import DEFAULT_API_URL
from epbench.reports.bot.sticky_comment import (
    CommentPlan,
    UpsertResult,
    plan_sticky_comment,
    upsert_sticky_comment,
)
from epbench.reports.comparison import (
    HEADLINES,
    VERDICTS,
    CompareError,
    Comparison,
    JsonValue,
)
from epbench.reports.outputs import COMPARE_FILE  # the verdicts, by compare-commits
from epbench.reports.sticky import STICKY_MARKER

PR_FILE = "pull-request.json"  # {"number": N}, written by the bench workflow
SCHEMA_FILE = Path(__file__).parent.parent / "comparison.schema.json"  # the comparison's own

# A 5,000-case grid's compare.json is about 4 MB; the PR file is one small object.
MAX_BYTES = {COMPARE_FILE: 8 * 2**20, PR_FILE: 1024}
# bench-out holds a handful of files; thousands mean something else was uploaded.
MAX_ENTRIES = 1000
# compare.json is a few levels deep; the limit keeps the decoder's recursion bounded.
MAX_DEPTH = 32
# Sequences that open or close an HTML comment (`--!>` closes one too, in HTML5).
COMMENT_DELIMITERS = ("<!--", "-->", "--!>")

_PR_SCHEMA = {
    "type": "object",
    "required": ["number"],
    "additionalProperties": False,
    "properties": {"number": {"type": "integer", "minimum": 1, "maximum": 2**31 - 1}},
}
_DRIVE_RE = re.compile(r"^[A-Za-z]:")
_REMEDY = "re-run the bench workflow; if it happens again, the pull request wrote the artifact"


class ArtifactError(EpbenchError):
    """The artifact cannot be trusted as data; nothing was posted."""


@dataclass(frozen=True)
class Artifact:
    """What the comment job takes from a bench run's artifact."""

    comparison: Comparison  # valid against comparison.schema.json, delimiter-free
    pr_number: int  # a claim, until GitHub confirms it
    source: str  # the folder or zip it came from, for messages


# -- reading entries: a folder or a zip, every entry checked ----------------------------


def _refuse(source: str, problem: str) -> ArtifactError:
    return ArtifactError(f"artifact {source}: {problem}; not commenting ({_REMEDY})")


def _shown(name: str) -> str:
    """A name from the artifact, safe on one log line (repr escapes newlines), bounded."""
    text = repr(name)
    return text if len(text) <= 120 else text[:119] + "…"


def _folder_entries(root: Path) -> Iterator[tuple[str, os.stat_result]]:
    """(relative posix name, lstat) of every entry under root, symlinks not followed."""
    pending = [root]
    while pending:
        folder = pending.pop()
        with os.scandir(folder) as it:
            for entry in it:
                info = entry.stat(follow_symlinks=False)
                name = Path(entry.path).relative_to(root).as_posix()
                yield name, info
                if stat.S_ISDIR(info.st_mode):
                    pending.append(Path(entry.path))


def _check_folder(root: Path, source: str) -> None:
    for count, (name, info) in enumerate(_folder_entries(root), start=1):
        if count > MAX_ENTRIES:
            raise _refuse(source, f"more than {MAX_ENTRIES} entries")
        if stat.S_ISLNK(info.st_mode):
            raise _refuse(source, f"entry {_shown(name)} is a symbolic link")
        if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
            raise _refuse(source, f"entry {_shown(name)} is not a regular file or folder")


def _read_folder_file(root: Path, name: str, source: str) -> bytes | None:
    path = root / name
    try:
        # O_NOFOLLOW: the file read is the file checked, even if a link appeared since.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _refuse(source, f"cannot open {name} ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise _refuse(source, f"{name} is not a regular file")
        return _bounded_read(fh.read, info.st_size, name, source)


def _bounded_read(read: Callable[[int], bytes], declared: int, name: str, source: str) -> bytes:
    limit = MAX_BYTES[name]
    if declared > limit:
        raise _refuse(source, f"{name} is {declared} bytes, more than the {limit} allowed")
    data = read(limit + 1)  # a size that lied (a growing file, a zip header) is caught here
    if len(data) > limit:
        raise _refuse(source, f"{name} is more than the {limit} bytes allowed")
    return data


def _zip_member_problem(info: zipfile.ZipInfo) -> str | None:
    name = info.filename
    parts = PurePosixPath(name).parts
    if "\x00" in name or "\\" in name:
        return "has a NUL or backslash in its name"
    if name.startswith("/") or _DRIVE_RE.match(name):
        return "is an absolute path"
    if ".." in parts:
        return "climbs out of the artifact (..)"
    # Unix zips keep st_mode in the high 16 bits; many writers leave the file type 0.
    kind = stat.S_IFMT(info.external_attr >> 16)
    if kind == stat.S_IFLNK:
        return "is a symbolic link"
    if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
        return "is not a regular file or folder"
    return None


def _read_zip(path: Path, source: str, names: tuple[str, ...]) -> dict[str, bytes | None]:
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise _refuse(source, f"not a readable zip ({exc})") from None
    with archive:
        members = archive.infolist()
        if len(members) > MAX_ENTRIES:
            raise _refuse(source, f"more than {MAX_ENTRIES} entries")
        seen: set[str] = set()
        for info in members:
            problem = _zip_member_problem(info)
            if problem is not None:
                raise _refuse(source, f"member {_shown(info.filename)} {problem}")
            key = info.filename.rstrip("/")
            if key in seen:
                raise _refuse(source, f"member {_shown(info.filename)} appears twice")
            seen.add(key)
        found: dict[str, bytes | None] = {}
        for name in names:
            try:
                info = archive.getinfo(name)
            except KeyError:
                found[name] = None
                continue
            with archive.open(info) as fh:
                found[name] = _bounded_read(fh.read, info.file_size, name, source)
        return found


def _read_files(path: Path, names: tuple[str, ...]) -> tuple[str, dict[str, bytes | None]]:
    source = str(path)
    try:
        info = path.lstat()
    except FileNotFoundError:
        raise ArtifactError(
            f"no artifact at {path}: pass the folder actions/download-artifact wrote, or the "
            "artifact's zip"
        ) from None
    if stat.S_ISLNK(info.st_mode):
        raise _refuse(source, "the artifact path itself is a symbolic link")
    if stat.S_ISDIR(info.st_mode):
        _check_folder(path, source)
        return source, {name: _read_folder_file(path, name, source) for name in names}
    if stat.S_ISREG(info.st_mode):
        return source, _read_zip(path, source, names)
    raise _refuse(source, "neither a folder nor a zip file")


# -- decoding and validating -------------------------------------------------------------


@dataclass(frozen=True)
class _NotFinite:
    """A number as written in the file that is not a finite float, kept to be named."""

    token: str


def _float(token: str) -> float | _NotFinite:
    value = float(token)
    return value if math.isfinite(value) else _NotFinite(token)  # 1e400 is inf


def _int(token: str) -> int | _NotFinite:
    value = int(token)
    try:
        float(value)  # every number is formatted as a float somewhere
    except OverflowError:
        return _NotFinite(token)
    return value


def _strict_json(data: bytes, name: str, source: str) -> object:
    def no_constant(token: str) -> _NotFinite:
        return _NotFinite(token)  # NaN, Infinity, -Infinity: named with their key later

    def no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
        doc = dict(pairs)
        if len(doc) != len(pairs):
            raise ValueError("a key appears twice in one object")
        return doc

    try:
        doc = json.loads(data.decode("utf-8"), parse_constant=no_constant,
                         parse_float=_float, parse_int=_int, object_pairs_hook=no_duplicates)
    except UnicodeDecodeError:
        raise _refuse(source, f"{name} is not UTF-8") from None
    except RecursionError:
        raise _refuse(source, f"{name} is nested too deeply") from None
    except ValueError as exc:
        raise _refuse(source, f"{name} is not valid JSON ({_shown(str(exc))})") from None
    return doc


def _walk_strings(value: object, where: str,
                  depth: int = 0) -> Iterator[tuple[str, str | _NotFinite]]:
    """(location, value) for every string, key included, and every number that is not
    finite, in a decoded document."""
    if depth > MAX_DEPTH:
        raise ValueError(f"{where or 'the document'} is nested more than {MAX_DEPTH} levels")
    if isinstance(value, (str, _NotFinite)):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield f"{where}.{key}" if where else str(key), key
            yield from _walk_strings(item, f"{where}.{key}" if where else str(key), depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk_strings(item, f"{where}[{index}]", depth + 1)


def _string_problem(text: str) -> str | None:
    for delimiter in COMMENT_DELIMITERS:
        if delimiter in text:
            return f"holds {delimiter!r}, which would end the hidden comment marker"
    for char in text:
        if char not in "\n\t" and unicodedata.category(char) in ("Cc", "Cf"):
            return f"holds the control or format character U+{ord(char):04X}"
    return None


def check_strings(doc: object, name: str, source: str) -> None:
    """Refuse a document with a number that is not finite, or a string that could break
    out of the comment's markup."""
    try:
        strings = list(_walk_strings(doc, ""))
    except ValueError as exc:
        raise _refuse(source, f"{name}: {exc}") from None
    for where, text in strings:
        if isinstance(text, _NotFinite):
            raise _refuse(source, f"{name} at {_shown(where or 'the top level')} holds "
                                  f"{_shown(text.token)}, which is not a finite number")
        problem = _string_problem(text)
        if problem is not None:
            raise _refuse(source, f"{name} at {_shown(where)} {problem}")


def _validate(doc: object, schema: dict[str, JsonValue], name: str, source: str,
              against: str) -> None:
    try:
        import jsonschema
    except ImportError:
        raise EpbenchError(
            "reading an artifact needs the jsonschema package: pip install 'epbench[bot]'"
        ) from None
    validator = jsonschema.Draft202012Validator(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(doc))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "the top level"
        raise _refuse(
            source, f"{name} does not match {against} at {_shown(where)} "
            f"({_shown(error.message)})"
        )


def comparison_schema() -> dict[str, JsonValue]:
    """reports/comparison.schema.json, the form of compare.json."""
    return json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))


def read_artifact(path: str | Path) -> Artifact:
    """Read and check a bench run's artifact (a folder, or the zip GitHub serves)."""
    source, files = _read_files(Path(path), (COMPARE_FILE, PR_FILE))
    for name, data in files.items():
        if data is None:
            raise _refuse(source, f"no {name} in it (did the bench run get to a verdict? see "
                                  "its log)")
    pr_doc = _strict_json(files[PR_FILE] or b"", PR_FILE, source)
    check_strings(pr_doc, PR_FILE, source)
    _validate(pr_doc, _PR_SCHEMA, PR_FILE, source, 'its schema {"number": N > 0}')
    comparison = _strict_json(files[COMPARE_FILE] or b"", COMPARE_FILE, source)
    # Strings first: a schema message quotes the offending value, which is attacker text.
    check_strings(comparison, COMPARE_FILE, source)
    _validate(comparison, comparison_schema(), COMPARE_FILE, source,
              f"reports/{SCHEMA_FILE.name}")
    assert isinstance(comparison, dict) and isinstance(pr_doc, dict)  # the schemas said so
    try:
        typed = Comparison.from_json(comparison, COMPARE_FILE)
    except CompareError as exc:  # the schema allows what the settings refuse (--resamples 0)
        raise _refuse(source, str(exc)) from None
    return Artifact(comparison=typed, pr_number=int(pr_doc["number"]), source=source)


# -- the comment body -------------------------------------------------------------------


def comment_body(comparison: Comparison, artifact_hint: str | None = None) -> str:
    """The PR comment for an artifact's comparison, by this (the default branch's) code.

    The emoji and headline are looked up again from the verdict keys, so what the
    comment shows for a case always matches the verdict it names. The base commit's
    history is shown only when a change point touches the base. The finished body
    must hold exactly one HTML comment, the sticky marker, at its top.
    """
    history = comparison.base_history
    doc = replace(
        comparison,
        cases=tuple(replace(row, emoji=VERDICTS[row.verdict][0]) for row in comparison.cases),
        overall=replace(comparison.overall, headline=HEADLINES[comparison.overall.key]),
        # The base's history says nothing: report.md has the one short line, the PR none.
        base_history=history if history is not None and history.findings else None,
    )
    body = render.render_markdown(doc)
    if artifact_hint:
        # The HTML page (plots of every case, the forest plot) travels in the artifact.
        body = body.rstrip("\n") + ("\n\nPlots of every case and the forest plot: "
                                     f"`report.html` in the run's artifact, {artifact_hint}\n")
    check_comment_body(body)
    return body


def check_comment_body(body: str) -> None:
    """Refuse a body whose only HTML comment is not the sticky marker at the top."""
    opened, closed = body.count("<!--"), body.count("-->") + body.count("--!>")
    if not body.startswith(STICKY_MARKER) or opened != 1 or closed != 1:
        raise ArtifactError(
            f"the rendered comment holds {opened} HTML comment opening(s) and {closed} "
            "closing(s), where only the sticky marker may be: not commenting; check "
            "reports/templates/comment.md.j2 for an HTML comment"
        )


def comment_from_artifact(
    artifact_path: str | Path,
    *,
    repo: str,
    run_head_sha: str,
    token: str,
    api_url: str = DEFAULT_API_URL,
    artifact_hint: str | None = None,
    token_source: str = "GITHUB_TOKEN",
    bot_login: str | None = None,
    log: Callable[[str], None] | None = None,
) -> tuple[int, UpsertResult]:
    """Read the artifact, render the comment, and upsert it on the PR GitHub confirms.

    Every check on the artifact runs before the first request; the PR number from the
    artifact is used only if that PR's head commit is `run_head_sha`. Returns the PR
    number and what the upsert did.
    """
    artifact = read_artifact(artifact_path)
    body = comment_body(artifact.comparison, artifact_hint)
    result = upsert_sticky_comment(
        repo, artifact.pr_number, body, token, api_url, artifact_hint=artifact_hint,
        token_source=token_source, expect_head_sha=run_head_sha, bot_login=bot_login, log=log,
    )
    return artifact.pr_number, result


def plan_comment_from_artifact(
    artifact_path: str | Path,
    *,
    repo: str,
    run_head_sha: str,
    token: str,
    api_url: str = DEFAULT_API_URL,
    artifact_hint: str | None = None,
    token_source: str = "GITHUB_TOKEN",
    bot_login: str | None = None,
    log: Callable[[str], None] | None = None,
) -> CommentPlan:
    """comment_from_artifact's every check and lookup, with a token that only reads, and
    the plan of the one request to make instead of making it (see
    reports.bot.sticky_comment.plan_sticky_comment)."""
    artifact = read_artifact(artifact_path)
    body = comment_body(artifact.comparison, artifact_hint)
    return plan_sticky_comment(
        repo, artifact.pr_number, body, token, api_url, artifact_hint=artifact_hint,
        token_source=token_source, expect_head_sha=run_head_sha, bot_login=bot_login, log=log,
    )
