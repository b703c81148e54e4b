"""Static checks on the engine's C sources that keep the counters complete.

Every call into OrtApiBase/OrtApi/OrtEpApi must go through EBE_CALL/EBE_CALL0/EBE_CALL_T
(which count it), and every heap allocation through ebe_malloc/ebe_calloc/ebe_free (which
count it). The scan works on whole files with comments and strings stripped, so neither a
line break nor a comment hides anything. The member names come from the fetched ORT headers
(the bodies of struct OrtApiBase, OrtApi and OrtEpApi). Outside the three macro definitions
in ebe_common.h, matched exactly, an ORT member name may appear only as the member argument
of one of those macros: a member access of any shape (`api->X(`, `(api->X)(`, `f = api->X`,
`&api->X`, split over lines) is an uncounted call, and so is a new macro that forwards a
member through its parameters (it would make its callers' member names look harmless).
EBE_CALL_T counts into a tally: every tally must be `*calls`, and every function that owns
a `calls` tally must add it to `ort_api_calls`.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from epbench import engine

SOURCE_DIR = Path(engine.__file__).resolve().parent / "src"
RAW_HEAP = re.compile(r"\b(malloc|calloc|realloc|free|strdup|strndup|aligned_alloc|"
                      r"posix_memalign)\s*\(")
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
STRING = re.compile(r'"(?:\\.|[^"\\])*"')
# The counted allocator is the one place that may call the C heap.
HEAP_OWNER = "common.c"
MACRO_HEADER = "ebe_common.h"
# The sanctioned definitions, exactly (comment-stripped, whitespace-normalized): the only
# places where an ORT member is reached through a pointer.
SANCTIONED = (
    "#define EBE_CALL(counters, api, member, ...) (ebe_probe_add((counters), "
    "EBE_C_ORT_API_CALLS, 1), (api)->member(__VA_ARGS__))",
    "#define EBE_CALL0(counters, api, member) (ebe_probe_add((counters), "
    "EBE_C_ORT_API_CALLS, 1), (api)->member())",
    "#define EBE_CALL_T(tally, api, member, ...) (++(tally), (api)->member(__VA_ARGS__))",
)
# Where a member name may stand: the member argument of a counting macro.
MACRO_MEMBER_ARG = re.compile(
    r"\bEBE_CALL(?:0|_T)?\(\s*[^(),]+,\s*[^(),]+,\s*([A-Za-z_]\w*)\s*[,)]")
DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)(\(([^)]*)\))?((?:[^\n]*\\\n)*[^\n]*)",
                    re.M)
TALLY = re.compile(r"\bEBE_CALL_T\(\s*([^,]+?)\s*,")


def _code(text: str) -> str:
    return STRING.sub('""', COMMENT.sub(" ", text))


def _normalized(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("\\\n", " ")).strip()


@functools.cache
def ort_member_names() -> frozenset[str]:
    """Every member of OrtApiBase, OrtApi and OrtEpApi, read from the fetched headers."""
    from epbench.engine.build import ort_include_dir

    include = ort_include_dir()
    names: set[str] = set()
    for header, struct in (("onnxruntime_c_api.h", "OrtApiBase"),
                           ("onnxruntime_c_api.h", "OrtApi"),
                           ("onnxruntime_ep_c_api.h", "OrtEpApi")):
        text = _code((include / header).read_text())
        start = text.index(f"struct {struct} {{")
        depth, end = 0, start
        for end in range(text.index("{", start), len(text)):
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            if depth == 0:
                break
        body = text[start:end]
        found = (set(re.findall(r"ORT_API2_STATUS\(\s*(\w+)", body))
                 | set(re.findall(r"ORT_API_T\(\s*[^,]+,\s*(\w+)", body))
                 | {"Release" + x for x in re.findall(r"ORT_CLASS_RELEASE2?\(\s*(\w+)", body)}
                 | set(re.findall(r"ORT_API_CALL\s*\*\s*(\w+)\s*\)", body)))
        assert len(found) > 1, f"no members parsed from struct {struct} in {header}"
        names |= found
    return frozenset(names)


def _without_sanctioned(code: str) -> str:
    """The code with the sanctioned macro definitions blanked out (exact matches only)."""
    out = []
    for match in DEFINE.finditer(code):
        if _normalized(match.group(0)) in SANCTIONED:
            out.append((match.start(), match.end()))
    for start, end in reversed(out):
        code = code[:start] + " " + code[end:]
    return code


def uncounted_ort_calls(text: str) -> list[str]:
    """ORT members reached other than through a counting macro, and forwarding macros."""
    code = _without_sanctioned(_code(text))
    members = ort_member_names()
    allowed = {m.start(1) for m in MACRO_MEMBER_ARG.finditer(code)}
    found = [m.group(0) for m in re.finditer(r"\b[A-Za-z_]\w*\b", code)
             if m.group(0) in members and m.start() not in allowed]
    for define in DEFINE.finditer(code):  # a macro that reaches a member named by a parameter
        params = {p.strip() for p in (define.group(3) or "").split(",")} - {"", "..."}
        accessed = set(re.findall(r"(?:->|\.)\s*([A-Za-z_]\w*)", define.group(4)))
        if params & accessed:
            found.append(f"#define {define.group(1)}")
    return found


def _function_bodies(code: str) -> list[str]:
    """The top-level brace blocks of a C file (function bodies, struct bodies)."""
    bodies, depth, start = [], 0, 0
    for i, ch in enumerate(code):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                bodies.append(code[start:i + 1])
    return bodies


def unreported_tallies(text: str) -> list[str]:
    """EBE_CALL_T tallies that never reach ort_api_calls."""
    code = _without_sanctioned(_code(text))
    problems = [f"tally {t!r}" for t in TALLY.findall(code) if t != "*calls"]
    for body in _function_bodies(code):
        if re.search(r"\buint64_t\s+calls\s*[=;]", body) and not re.search(
                r"ebe_probe_add\([^;]*EBE_C_ORT_API_CALLS\s*,\s*calls\s*\)", body):
            problems.append("a calls tally never added to ort_api_calls")
    return problems


def raw_heap_calls(text: str) -> list[str]:
    return RAW_HEAP.findall(_code(text))


def _sources() -> list[Path]:
    files = sorted(SOURCE_DIR.glob("*.c")) + sorted(SOURCE_DIR.glob("*.h"))
    assert files, f"no engine sources in {SOURCE_DIR}"
    return files


def test_every_ort_call_goes_through_the_counting_macro() -> None:
    offenders = {p.name: calls for p in _sources() if (calls := uncounted_ort_calls(p.read_text()))}
    assert offenders == {}


def test_the_sanctioned_definitions_are_there_exactly_once() -> None:
    code = _code((SOURCE_DIR / MACRO_HEADER).read_text())
    defined = [_normalized(m.group(0)) for m in DEFINE.finditer(code)]
    for definition in SANCTIONED:
        assert defined.count(definition) == 1, definition
    for path in _sources():
        if path.name != MACRO_HEADER:
            assert not set(SANCTIONED) & {_normalized(m.group(0))
                                          for m in DEFINE.finditer(_code(path.read_text()))}


def test_member_names_come_from_the_headers() -> None:
    names = ort_member_names()
    assert {"GetApi", "CreateStatus", "KernelContext_GetInput", "ReleaseStatus",
            "EpGraphSupportInfo_AddNodesToFuse", "ReleaseEpDevice"} <= names
    assert "GetCapability" not in names  # an OrtEp slot the engine fills, not an API member


def test_the_scan_catches_an_uncounted_call() -> None:
    assert uncounted_ort_calls("x = api->ReleaseStatus(st);") == ["ReleaseStatus"]
    assert uncounted_ort_calls("x = (*api).GetTensorData(v, &p);") == ["GetTensorData"]
    assert uncounted_ort_calls("EBE_CALL(c, api, GetTensorData, v, &p);") == []
    assert uncounted_ort_calls("EBE_CALL_T(*calls, plan->api, GetTensorData, v, &p);") == []
    assert uncounted_ort_calls("EBE_CALL0(c, api, GetEpApi);") == []
    assert uncounted_ort_calls("/* api->ReleaseStatus(st) */ int x;") == []


def test_the_scan_catches_each_known_escape() -> None:
    escapes = {
        "split over two lines": "st = api->\n    CreateStatus(ORT_FAIL, msg);",
        "parenthesised member": "st = (api->CreateStatus)(ORT_FAIL, msg);",
        "function-pointer alias": "void *f = api->CreateStatus; st = f(ORT_FAIL, msg);",
        "address of a member": "fn = &api->CreateStatus;",
        "new macro with the prefix": (
            "#define EBE_CALL_FAST(api, member, ...) (api)->member(__VA_ARGS__)\n"
            "st = EBE_CALL_FAST(api, CreateStatus, ORT_FAIL, msg);"),
        "a sanctioned name, another body": (
            "#define EBE_CALL(counters, api, member, ...) (api)->member(__VA_ARGS__)\n"
            "st = EBE_CALL(c, api, CreateStatus, ORT_FAIL, msg);"),
        "member named outside a macro": "OrtStatus *(*f)(int, const char *) = CreateStatus;",
    }
    for name, snippet in escapes.items():
        assert uncounted_ort_calls(snippet) != [], name


def test_every_call_tally_reaches_the_counters() -> None:
    offenders = {p.name: t for p in _sources() if (t := unreported_tallies(p.read_text()))}
    assert offenders == {}
    # The escapes: a tally of another name, and a `calls` tally nobody adds.
    assert unreported_tallies(
        "void f(void) { uint64_t t = 0; EBE_CALL_T(t, api, GetTensorData, v, &p); }") != []
    assert unreported_tallies(
        "OrtStatus *f(void) { uint64_t calls = 0; return g(&calls); }") != []
    assert unreported_tallies(
        "OrtStatus *f(void) { uint64_t calls = 0; OrtStatus *s = g(&calls);\n"
        "  ebe_probe_add(plan->counters, EBE_C_ORT_API_CALLS, calls); return s; }") == []


def test_every_allocation_is_counted() -> None:
    offenders = {p.name: calls for p in _sources()
                 if p.name != HEAP_OWNER and (calls := raw_heap_calls(p.read_text()))}
    assert offenders == {}
    assert raw_heap_calls("p = malloc(4); ebe_malloc(c, 4);") == ["malloc"]


def test_the_counting_macro_counts() -> None:
    header = _code((SOURCE_DIR / "ebe_common.h").read_text())
    for macro in ("EBE_CALL", "EBE_CALL0"):
        body = re.search(rf"#define {macro}\(.*?\)\s*\\\n(.*?)\n(?!.*\\$)", header + "\n", re.S)
        assert body is not None, macro
        assert "ebe_probe_add" in body.group(1) and "EBE_C_ORT_API_CALLS" in body.group(1)


def test_no_ort_header_text_in_the_repository() -> None:
    """The headers are fetched at build time; none may be committed."""
    root = SOURCE_DIR.parent.parent
    for path in [*SOURCE_DIR.iterdir(), *root.glob("*.h")]:
        assert not path.name.startswith("onnxruntime_"), path
        if path.suffix in (".c", ".h"):
            assert "struct OrtApi {" not in path.read_text(), path


def test_every_public_symbol_is_prefixed() -> None:
    """Non-static functions are ebe_* (internal) or the exported entry points and probe."""
    exported = set(re.findall(r"^\s+([A-Za-z_]\w*);", (SOURCE_DIR / "epbench_engine.map")
                              .read_text(), re.M))
    assert {"CreateEpFactories", "ReleaseEpFactory", "epbench_probe_snapshot",
            "epbench_probe_snapshot_ep", "epbench_probe_reset", "epbench_probe_name"} <= exported
    definition = re.compile(
        r"^(?!static\b)(?:[A-Za-z_][\w\s\*]*?[\s\*])([A-Za-z_]\w*)\s*\([^;]*?\)\s*\{",
        re.M | re.S)
    for path in SOURCE_DIR.glob("*.c"):
        for name in definition.findall(_code(path.read_text())):
            assert name.startswith("ebe_") or name in exported, f"{path.name}: {name}"
