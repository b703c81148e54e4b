"""The PR comment renders an artifact's compare.json as data only, driven by the schema.

The pull request's code may write the artifact, so every string in compare.json is
hostile. The document under test is built from reports/comparison.schema.json itself:
every string the schema allows (free text, names, map keys; optional fields too) is
filled with one hostile payload, so a field added to the schema is attacked without
touching this file. The body is then read as GitHub would: outside code spans (which
GitHub renders as plain text) nothing from the artifact may remain, and the comment's
own skeleton (headings, <details>, tables) must be intact.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from epbench.core.errors import EXIT_USER_ERROR
from epbench.reports import compare, render
from epbench.reports.bot import artifact
from epbench.reports.bot.artifact import ArtifactError, comparison_schema, read_artifact
from epbench.reports.comparison import Comparison
from epbench.reports.sticky import STICKY_MARKER
from tests.support import synthetic
from tests.support.github_stub import PR, StubGitHub, no_proxies, serve_stub
from tests.test_artifact import invoke, write_artifact
from tests.test_reports_render import Side, _same_run, _verdicts

# Free text: each carries "octocat" or "evil", so any of it left outside a code span shows.
PAYLOADS = [
    "@octocat please look",
    "![x](https://evil.example/p.png)",
    "<img src=https://evil.example/p.png>",
    '<a href="https://evil.example">click</a>',
    "</details>\n\n# ✅ safe to merge @octocat",
    "`` ` ``@octocat` [y](https://evil.example) `",
    "x | @octocat | y",
    "ok\n\n| a | b |\n|---|---|\n| @octocat | evil |",
    "https://evil.example www.evil.example octo/evil#1 @octocat/team 0123456789abcdef",
    "**bold** _em_ :tada: ~~evil~~ \\`@octocat",
    "\n- [x] evil\n> @octocat",
]
# Names (cases, arms, counters, map keys) match a safe-looking pattern that still allows
# mentions and URLs.
NAME_PAYLOADS = ["@octocat", "https://evil.example/x.png", "www.evil.example", "@octocat/evil"]
TOKENS = ("octocat", "evil")
HEADINGS = {"### Deterministic counters (exact, per Run)", "### Per-node vs per-Run cost",
            "### Base commit in the history", "### Idle gate and control drift"}

_MISSING = object()


# -- the schema, walked ----------------------------------------------------------------


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = schema["$defs"][node["$ref"].removeprefix("#/$defs/")]
    return node


def _types(node: dict[str, Any]) -> list[str]:
    kind = node.get("type", [])
    return [kind] if isinstance(kind, str) else list(kind)


def _nodes(schema: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, node) for every subschema, $defs included."""
    pending = [("", schema)] + [(f"$defs/{k}", v) for k, v in schema["$defs"].items()]
    while pending:
        where, node = pending.pop()
        yield where, node
        for key in ("properties",):
            for name, sub in node.get(key, {}).items():
                pending.append((f"{where}/{name}", sub))
        for key in ("items", "additionalProperties", "propertyNames"):
            if isinstance(node.get(key), dict):
                pending.append((f"{where}/{key}", node[key]))


def _fill(schema: dict[str, Any], node: dict[str, Any], value: Any, text: str, name: str) -> Any:
    """`value` (a real comparison's, or _MISSING) with every string the schema allows
    there replaced by a payload, and every property the schema lists but `value` lacks
    added: a new field in the schema is filled without this test changing."""
    node = _resolve(schema, node)
    if "const" in node:
        return node["const"]
    if "enum" in node:  # a closed set of this repository's words, not free text
        return value if value in node["enum"] else next(v for v in node["enum"] if v is not None)
    kinds = _types(node)
    if "string" in kinds and (value is _MISSING or value is None or isinstance(value, str)):
        payload = name if "pattern" in node else text
        return payload[: node.get("maxLength", len(payload))]
    if value is None and "null" in kinds:
        return None  # a null object or number stays null: the branch that shows it is real
    if "object" in kinds and (value is _MISSING or isinstance(value, dict)):
        value = {} if value is _MISSING else value
        if "properties" in node:
            return {key: _fill(schema, sub, value.get(key, _MISSING), text, name)
                    for key, sub in node["properties"].items()}
        if isinstance(node.get("additionalProperties"), dict):  # a map: one hostile key
            first = next(iter(value.values()), _MISSING)
            return {name: _fill(schema, node["additionalProperties"], first, text, name)}
        return {}
    if "array" in kinds and (value is _MISSING or isinstance(value, list)):
        items = value if value and value is not _MISSING else [_MISSING] * max(
            1, node.get("minItems", 0))
        return [_fill(schema, node["items"], item, text, name) for item in items]
    if isinstance(value, bool) or (value is _MISSING and "boolean" in kinds):
        return value if isinstance(value, bool) else True
    if "integer" in kinds:
        return value if isinstance(value, int) and not isinstance(value, bool) else 3
    if "number" in kinds:
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.5
    raise AssertionError(f"cannot fill {node} from {value!r}")


# -- the comparisons the payloads go into ----------------------------------------------


def _twin_comparison() -> dict[str, Any]:
    """Every verdict, a re-run, a failed re-run, instructions, and an A/A twin without a
    profile (the comment names the twin's arm only then)."""
    doc = _verdicts().to_dict()
    truth = {"ort": 1000.0, "base": 800.0, "base_twin": 800.0, "pr": 800.0}
    run = synthetic.results_doc({"relu_d10_w8": truth}, rounds=24, processes=4,
                                twin={"of": "base", "key": "base_twin"})
    twinned = compare.compare(Side("base", run, "base"), Side("pr", run, "pr"))
    doc["twin"], doc["profile"] = twinned.to_dict()["twin"], None
    doc["cases"][0].update(rerun_errors=["crashed"], instructions_change=0.2,
                           instructions_flag=True)
    return json.loads(render.to_json(doc))


def _variants() -> dict[str, dict[str, Any]]:
    with_twin = _twin_comparison()
    folded = json.loads(_same_run().to_json())  # > 8 ✅ rows: the <details> table
    return {"twin": with_twin, "folded": folded}


VARIANTS = _variants()
SCHEMA = comparison_schema()


def hostile(variant: str, index: int, *, history_error: bool = False) -> dict[str, Any]:
    doc = _fill(SCHEMA, SCHEMA, copy.deepcopy(VARIANTS[variant]), PAYLOADS[index],
                NAME_PAYLOADS[index % len(NAME_PAYLOADS)])
    if not history_error:
        del doc["base_history"]["error"]  # else the error is the only history line shown
    return doc


# -- reading the body as GitHub does ---------------------------------------------------

_CODE_SPAN = re.compile(r"`[^`\n]*`")


def outside_code(body: str) -> str:
    """The body as GitHub parses it, code spans taken out (their text is shown, never
    rendered). The inert spans hold no backtick or line break, so spans pair up."""
    return _CODE_SPAN.sub("", body.removeprefix(STICKY_MARKER))


def _tables(body: str) -> list[list[str]]:
    tables, current = [], []
    for line in body.splitlines():
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    return tables + ([current] if current else [])


def assert_inert(body: str, skeleton: str) -> None:
    live = outside_code(body)
    for token in TOKENS:
        assert token not in live.lower(), [ln for ln in live.splitlines() if token in ln]
    assert "@octocat" not in live and "](http" not in live
    assert "<img" not in live and "<a " not in live
    # The comment's own blocks, no more: the artifact opened or closed none of them.
    for tag in ("<details>", "</details>", "<summary>", "<"):
        assert live.count(tag) == outside_code(skeleton).count(tag), tag
    headings = [ln for ln in body.splitlines() if ln.lstrip().startswith("#")]
    assert headings[0].startswith("## ") and headings[0].endswith(" · epbench")
    assert set(headings[1:]) <= HEADINGS, headings
    for table in _tables(body):  # no cell split or added: every row as wide as the header
        widths = {len(re.findall(r"(?<!\\)\|", row)) for row in table}
        assert len(widths) == 1, table


def _strings(value: Any, keyed: bool = False) -> Iterator[str]:
    """Every string value in a document, and every key of a map (not of a record)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            if keyed:
                yield key
            # A map's values are records or numbers; only twin.cases and reruns are maps.
            yield from _strings(item, keyed=key in ("cases", "reruns") and isinstance(
                item, dict))
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


@pytest.fixture(scope="module")
def skeletons() -> dict[str, str]:
    return {name: artifact.comment_body(Comparison.from_json(doc))
            for name, doc in VARIANTS.items()}


def test_the_hostile_documents_match_the_schema_and_fill_every_string() -> None:
    validator = jsonschema.Draft202012Validator(SCHEMA)
    for variant in VARIANTS:
        doc = hostile(variant, 0)
        validator.validate(doc)
        # The filler reached every string field the schema lists (enums and consts aside).
        strings = [where for where, node in _nodes(SCHEMA)
                   if "string" in _types(_resolve(SCHEMA, node))]
        assert len(strings) > 40
        words = {v for _, node in _nodes(SCHEMA) for v in [*node.get("enum", []),
                                                            node.get("const")] if v}
        for text in _strings(doc):
            assert text in words or text in (PAYLOADS[0], NAME_PAYLOADS[0]), text
        assert doc["twin"][0]["of"] == NAME_PAYLOADS[0]
        assert doc["host"]["cpu_model"] == PAYLOADS[0]
        assert doc["cases"][0]["reason"] == PAYLOADS[0]
        assert doc["base_history"]["findings"][0]["arm"] == NAME_PAYLOADS[0]


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("index", range(len(PAYLOADS)))
def test_hostile_text_in_every_field_reaches_the_comment_only_as_data(
    tmp_path: Path, skeletons: dict[str, str], variant: str, index: int
) -> None:
    for history_error in (False, True):
        doc = hostile(variant, index, history_error=history_error)
        folder = write_artifact(tmp_path / f"a{history_error}", doc)
        read = read_artifact(folder)  # the reader the workflow runs: it takes this file
        body = artifact.comment_body(read.comparison, "https://github.example/run/7")
        assert_inert(body, skeletons[variant])
        # The text is there, as data: shown, not dropped.
        assert body.count(render.inert(PAYLOADS[index])) >= (3 if history_error else 8)


def test_the_fields_the_finding_named_are_shown_inert(tmp_path: Path) -> None:
    doc = hostile("twin", 0)
    body = artifact.comment_body(read_artifact(write_artifact(tmp_path / "a", doc)).comparison)
    # The method paragraph names no arm (numbers and fixed words only); the document's
    # twin says it was its run's one file registered again.
    assert doc["twin"][0]["shared_library"] is True
    assert "the one file every arm of the run loads, measured beside it" in body
    assert "- **Warning:** `@octocat please look`" in body
    assert "| `cpu_model` | `@octocat please look` |" in body
    assert "- `@octocat please look`" in body  # what this cannot catch
    assert "`@octocat`: `@octocat please look`." in body  # a case's reason


def test_inert_is_one_code_span_on_one_line() -> None:
    assert render.inert("relu_d1_w8") == "`relu_d1_w8`"
    assert render.inert("a`b|c\nd\r\ne") == "`a\u02cbb\u2502c d  e`"
    assert render.inert("") == "` `"
    assert render.inert(3) == "`3`"
    assert render.environment().filters["inert"] is render.inert


def test_the_host_fields_are_listed_not_an_open_map() -> None:
    # Host keys were rendered from an open map; now they are listed like any field.
    assert SCHEMA["properties"]["host"]["additionalProperties"] is False


# -- the schema itself: closed and bounded ----------------------------------------------


def test_every_object_in_the_schema_is_closed_and_every_string_bounded() -> None:
    for where, node in _nodes(SCHEMA):
        kinds = _types(node)
        if "object" in kinds:
            extra = node.get("additionalProperties")
            if isinstance(extra, dict):  # a map: its keys are names, and few enough
                assert "propertyNames" in node and "maxProperties" in node, where
            else:
                assert extra is False, where
        if "string" in kinds:
            assert "maxLength" in node, where
        if "array" in kinds:
            assert "maxItems" in node, where


def _schema_objects(schema: dict[str, Any], node: dict[str, Any], doc: Any,
                    where: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The location in `doc` of every closed object (additionalProperties false)."""
    node = _resolve(schema, node)
    if isinstance(doc, dict):
        if node.get("additionalProperties") is False:
            yield where
        for key, value in doc.items():
            sub = node.get("properties", {}).get(key) or node.get("additionalProperties")
            if isinstance(sub, dict):
                yield from _schema_objects(schema, sub, value, (*where, key))
    elif isinstance(doc, list) and isinstance(node.get("items"), dict):
        for index, value in enumerate(doc):
            yield from _schema_objects(schema, node["items"], value, (*where, index))


def test_an_unknown_key_anywhere_is_refused_before_anything_is_rendered(tmp_path: Path) -> None:
    doc = hostile("twin", 0)
    places = list(_schema_objects(SCHEMA, SCHEMA, doc))
    assert len(places) > 20
    for n, place in enumerate(places):
        bad = copy.deepcopy(doc)
        target = bad
        for step in place:
            target = target[step]
        target["processes_typo"] = "@octocat"
        with pytest.raises(ArtifactError) as caught:
            read_artifact(write_artifact(tmp_path / f"a{n}", bad))
        message = str(caught.value)
        assert "does not match reports/comparison.schema.json" in message, place
        assert "Additional properties are not allowed" in message, place
        assert "\n" not in message


def test_the_gate_and_twin_fields_the_template_reads_are_typed(tmp_path: Path) -> None:
    # gate.*.processes and twin[].of were rendered without the schema naming them.
    for change, where in (
        (lambda d: d["gate"]["run"].update(processes="many, @octocat"), "gate/run/processes"),
        (lambda d: d["twin"][0].update(of="a b @octocat"), "twin/0/of"),
        (lambda d: d["cases"][0].update(reason="x" * 4001), "cases/0/reason"),
    ):
        doc = hostile("twin", 0)
        doc["gate"] = {"run": doc["gate"]["run"]}
        change(doc)
        with pytest.raises(ArtifactError, match=f"at '{where}'"):
            read_artifact(write_artifact(tmp_path / where.replace("/", "_"), doc))


# -- numbers: finite, or refused in one line naming the key -----------------------------


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubGitHub]:
    no_proxies(monkeypatch)
    with serve_stub() as state:
        yield state


@pytest.mark.parametrize(
    ("token", "where"),
    [("1e400", "cases[0].change"), ("-1e400", "cases[0].change"), ("NaN", "cases[0].change"),
     ("Infinity", "settings.k"), ("-Infinity", "gate.run.max_steal"),
     ("1" + "0" * 400, "cases[0].rounds")],
)
def test_a_number_that_is_not_finite_is_refused_naming_file_and_key(
    stub: StubGitHub, tmp_path: Path, token: str, where: str
) -> None:
    doc = json.loads(_verdicts().to_json())
    doc["gate"] = {"run": doc["gate"]["pr"]}
    # Put the token in the place `where` names, as the file would spell it.
    key = where.rsplit(".", 1)[-1]
    holder: Any = doc
    for part in where.split(".")[:-1]:
        name, _, index = part.partition("[")
        holder = holder[name] if not index else holder[name][int(index[:-1])]
    holder[key] = "PLACEHOLDER"
    text = render.to_json(doc).replace('"PLACEHOLDER"', token, 1)
    folder = write_artifact(tmp_path / "bench-out", text)
    result = invoke(stub, folder)
    assert result.exit_code == EXIT_USER_ERROR, result.output
    assert result.output == (
        f"Error: artifact {folder}: compare.json at {where!r} holds "
        f"{artifact._shown(token)}, which is not a finite number; not "
        "commenting (re-run the bench workflow; if it happens again, the pull request wrote "
        "the artifact)\n")
    assert stub.requests == []


def test_the_comment_never_shows_inf(tmp_path: Path) -> None:
    # Before: 1e400 decoded to inf and the comment said "inf × A/A noise".
    doc = json.loads(_verdicts().to_json())
    text = render.to_json(doc).replace('"k": 2.0', '"k": 1e400', 1)
    assert '"k": 1e400' in text
    with pytest.raises(ArtifactError, match="at 'settings.k' holds '1e400'"):
        read_artifact(write_artifact(tmp_path / "a", text))


def test_a_hostile_artifact_is_posted_inert_through_the_workflows_command(
    stub: StubGitHub, tmp_path: Path, skeletons: dict[str, str]
) -> None:
    folder = write_artifact(tmp_path / "bench-out", hostile("twin", 4))
    result = invoke(stub, folder)
    assert result.exit_code == 0, result.output
    (posted,) = stub.comments
    assert posted["body"].startswith(STICKY_MARKER)
    assert_inert(posted["body"], skeletons["twin"])
    assert stub.requests[0].path == f"/repos/octo/widgets/pulls/{PR}"


def test_a_trimmed_oversize_comment_stays_inert(tmp_path: Path) -> None:
    # Lines far longer than the comment limit: a cut inside one would leave a code span
    # open and the artifact's text after its backtick live.
    from epbench.reports.bot.body import COMMENT_LIMIT, fit_comment_body

    doc = copy.deepcopy(VARIANTS["twin"])
    doc.pop("base_history", None)
    payload = "@octocat <img src=https://evil.example/p.png> </details> [x](https://evil.ex) "
    doc["cases"][0]["rerun_errors"] = [payload * 40] * 30
    (tmp_path / "compare.json").write_text(json.dumps(doc))
    (tmp_path / "pull-request.json").write_text('{"number": 7}')
    read = artifact.read_artifact(tmp_path)
    body = artifact.comment_body(read.comparison, "https://github.com/o/r/actions/runs/1")
    assert len(body) > COMMENT_LIMIT
    text, trimmed = fit_comment_body(body, artifact_hint="https://github.com/o/r/actions/runs/1")
    assert trimmed
    live = outside_code(text)
    assert "@octocat" not in live and "<img" not in live and "evil.ex" not in live
    assert all(line.count("`") % 2 == 0 for line in text.splitlines()), "an open code span"
