"""Least-privilege rules for every GitHub workflow file (and a root action.yml).

Each rule takes a loaded file and returns the problems it finds, one line each, so the
tests run every rule on every file found by the glob, and show each rule catching a
mutated copy. The rules (issue 45): read-only permissions at workflow level; `write`
only on a job that pushes and installs nothing; no token in .git/config where packages
are installed; secrets only in the steps that use them; actions pinned by commit SHA
with the tag in a comment.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent

Doc = dict[str, Any]
Step = dict[str, Any]

# Commands that install packages from a registry (PyPI, npm, Debian, ...), or run a
# make target, which here always may (`make setup`, `make test`, cross-toolchain).
INSTALLS = re.compile(
    r"\bmake\b|\bpip3?\s+install\b|-m\s+pip\b|\bpipx\b|\buv\s+(pip|sync|add|tool)\b"
    r"|\bpoetry\s+install\b|\bnpm\b|\bnpx\b|\byarn\b|\bpnpm\b|\bgem\s+install\b"
    r"|\bcargo\s+install\b|\bgo\s+(install|get)\b|\bapt(-get)?\s+install\b|\bconda\b"
)
# Actions that fetch a toolchain and restore its package cache.
INSTALLING_ACTIONS = ("actions/setup-",)
GIT_PUSH = re.compile(r"\bgit\b[^\n]*\bpush\b")
# A secret, or the job's token, inside an expression.
SECRET = re.compile(r"\$\{\{[^}]*?(?:\bsecrets\s*[.\[]|\bgithub\.token\b)[^}]*\}\}")
SHA_PIN = re.compile(r"[^@\s]+@[0-9a-f]{40}")
# `uses: owner/repo@<sha> # v1.2.3`, as written in the file (the loaded YAML drops comments).
PINNED_LINE = re.compile(r"^\s*(?:-\s+)?uses:\s*['\"]?([^@\s'\"]+)@([0-9a-f]{40})['\"]?(.*)$")
TAG_COMMENT = re.compile(r"^\s+#\s*v\d+(\.\d+){0,2}\s*$")
READ_ONLY = {"read", "none"}

def workflow_files(root: Path = ROOT) -> list[Path]:
    """Every workflow of the repository, and the root action.yml when there is one."""
    folder = root / ".github" / "workflows"
    files = sorted([*folder.glob("*.yml"), *folder.glob("*.yaml")])
    files += [p for p in (root / "action.yml", root / "action.yaml") if p.is_file()]
    return files


# Each text parsed once per process, by its content: the test modules load the same few
# files 294 times while pytest collects them, which took 7 of the suite's 14 s of
# collection in every process (ruamel's parser is pure Python). A deep copy each time:
# tests mutate what they load.
_PARSED: dict[str, Doc] = {}


def load_text(text: str) -> Doc:
    # ruamel.yaml comes with check-jsonschema (test extras). It reads YAML 1.2,
    # where `on:` stays the string "on" (PyYAML's YAML 1.1 would make it True).
    from ruamel.yaml import YAML

    if text not in _PARSED:
        _PARSED[text] = YAML(typ="safe", pure=True).load(text)
    return copy.deepcopy(_PARSED[text])


def load(path: Path) -> Doc:
    return load_text(path.read_text(encoding="utf-8"))


def is_action(doc: Doc) -> bool:
    """A composite action (action.yml) rather than a workflow."""
    return "runs" in doc and "jobs" not in doc


def jobs(doc: Doc) -> dict[str, dict[str, Any]]:
    if is_action(doc):
        return {"action": {"steps": (doc.get("runs") or {}).get("steps") or []}}
    return doc.get("jobs") or {}


def job_steps(job: dict[str, Any]) -> Iterator[tuple[str, Step]]:
    """Each step of the job with a label for messages: `step 3 (its name)`."""
    for index, step in enumerate(job.get("steps") or []):
        run = str(step.get("run", "")).strip().split("\n")[0][:40]
        yield f"step {index + 1} ({step.get('name') or step.get('uses') or run})", step


def written_scopes(perms: Any) -> set[str]:
    """The scopes a `permissions:` value grants write on ('*' for write-all)."""
    if isinstance(perms, str):
        return {"*"} if perms == "write-all" else set()
    return {str(k) for k, v in (perms or {}).items() if v == "write"}


def installs(step: Step) -> str | None:
    """What in the step installs packages, or None. A local action (`uses: ./…`) counts:
    it is this repository's code, and its action.yml installs epbench."""
    uses = str(step.get("uses", ""))
    if uses.startswith(INSTALLING_ACTIONS):
        return uses.split("@")[0]
    if uses.startswith("./"):
        return f"{uses} (a local action)"
    found = INSTALLS.search(str(step.get("run", "")))
    return found[0] if found else None


def installing_steps(job: dict[str, Any]) -> list[str]:
    return [f"{where}: {what}" for where, s in job_steps(job) if (what := installs(s))]


# -- the rules -----------------------------------------------------------------------


def workflow_permissions_not_read_only(doc: Doc) -> list[str]:
    """The workflow-level token must be read-only and said: `contents: read` or `{}`."""
    if is_action(doc):
        return []
    perms = doc.get("permissions")
    if perms is None:
        return ["workflow permissions are not set (the repository default, maybe write)"]
    if not isinstance(perms, dict):
        return [f"workflow permissions are {perms!r}: name each scope, read-only"]
    return [
        f"workflow permissions grant {scope}: {level}"
        for scope, level in perms.items() if level not in READ_ONLY
    ]


def writers_that_install_or_push_nothing(doc: Doc) -> list[str]:
    """`write` only on a job that pushes, and such a job installs nothing."""
    problems = []
    for name, job in jobs(doc).items():
        # What the job's token holds: its own permissions, else the workflow's.
        written = written_scopes(job.get("permissions", doc.get("permissions")))
        if not written:
            continue
        if "*" in written:
            problems.append(f"{name}: permissions write-all: name the one scope it writes")
        if "contents" in written and not any(
            GIT_PUSH.search(str(s.get("run", ""))) for _, s in job_steps(job)
        ):
            problems.append(f"{name}: holds contents: write but runs no git push")
        # No exception: the PR comment bot (comment.yml) plans in a read-only job and posts
        # from one that installs nothing.
        scopes = ", ".join(sorted(written))
        problems += [
            f"{name}: holds {scopes}: write and installs packages, {found}"
            for found in installing_steps(job)
        ]
    return problems


def checkouts_keeping_the_token(doc: Doc) -> list[str]:
    """A job that installs packages checks out with `persist-credentials: false`."""
    problems = []
    for name, job in jobs(doc).items():
        if not installing_steps(job):
            continue
        for where, step in job_steps(job):
            if not str(step.get("uses", "")).startswith("actions/checkout@"):
                continue
            if (step.get("with") or {}).get("persist-credentials") is not False:
                problems.append(
                    f"{name}, {where}: leaves the token in .git/config in a job that "
                    "installs packages"
                )
    return problems


def _secrets_in(value: Any) -> list[str]:
    return SECRET.findall(str(value))


def secrets_beyond_their_steps(doc: Doc) -> list[str]:
    """Secrets (and the job token) only in a step's `env:` or `with:`."""
    problems = []
    if not is_action(doc):
        outside = {k: v for k, v in doc.items() if k != "jobs"}
        problems += [f"workflow level: {s} reaches every job" for s in _secrets_in(outside)]
    for name, job in jobs(doc).items():
        # A reusable workflow call hands secrets over by `secrets:`/`with:`, its step's env.
        allowed = {"steps", "secrets", "with"} if "uses" in job else {"steps"}
        outside = {k: v for k, v in job.items() if k not in allowed}
        problems += [f"{name}: job level: {s} reaches every step" for s in _secrets_in(outside)]
        for where, step in job_steps(job):
            rest = {k: v for k, v in step.items() if k not in ("env", "with")}
            for secret in _secrets_in(rest):
                problems.append(
                    f"{name}, {where}: {secret} outside the step's env: "
                    "(a script interpolating it can leak it)"
                )
    return problems


def unpinned_actions(doc: Doc) -> list[str]:
    """Every action from another repository is pinned by a full commit SHA."""
    problems = []
    for name, job in jobs(doc).items():
        found = [("job", job["uses"])] if "uses" in job else []
        found += [(where, s["uses"]) for where, s in job_steps(job) if "uses" in s]
        for where, uses in found:
            uses = str(uses)
            if uses.startswith("./"):
                continue  # this repository's own action, at the commit being run
            if uses.startswith("docker://"):
                pinned = "@sha256:" in uses
            else:
                pinned = SHA_PIN.fullmatch(uses) is not None
            if not pinned:
                problems.append(
                    f"{name}, {where}: uses {uses}: pin it by its full commit SHA, "
                    "the tag in a comment"
                )
    return problems


def pins_without_a_tag(text: str) -> list[str]:
    """Each SHA pin, as written, says its tag in a comment: `@<sha> # v4.2.2`."""
    problems = []
    for number, line in enumerate(text.splitlines(), start=1):
        match = PINNED_LINE.match(line)
        if match and not TAG_COMMENT.match(match.group(3)):
            problems.append(f"line {number}: {match.group(1)} pinned without `# vX.Y.Z`")
    return problems


def pins(text: str) -> dict[str, set[tuple[str, str]]]:
    """Each action pinned in the text: the (sha, comment) pairs it is pinned at."""
    found: dict[str, set[tuple[str, str]]] = {}
    for line in text.splitlines():
        match = PINNED_LINE.match(line)
        if match:
            found.setdefault(match.group(1), set()).add((match.group(2), match.group(3).strip()))
    return found


RULES = (
    workflow_permissions_not_read_only,
    writers_that_install_or_push_nothing,
    checkouts_keeping_the_token,
    secrets_beyond_their_steps,
    unpinned_actions,
)


def problems(text: str) -> list[str]:
    """Every rule on one file's text."""
    doc = load_text(text)
    found = [p for rule in RULES for p in rule(doc)]
    return found + pins_without_a_tag(text)
