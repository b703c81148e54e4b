"""Static checks on the engine's C sources that keep the counters complete.

Every call into OrtApiBase/OrtApi/OrtEpApi must go through EBE_CALL/EBE_CALL0 (which count
it), and every heap allocation through ebe_malloc/ebe_calloc/ebe_free (which count it).
ORT's members are called as `api->Member(...)`: capitalized, through a pointer or a struct.
The engine's own functions are lower-case `ebe_*`, so any capitalized member call in the
sources is an uncounted ORT call. The scan runs on comment-stripped text, so a call cannot
hide in a comment and a comment cannot trip it.
"""

from __future__ import annotations

import re
from pathlib import Path

import engine

SOURCE_DIR = Path(engine.__file__).resolve().parent / "src"
# `->Member(` or `.Member(` with an ORT-style capitalized member name.
MEMBER_CALL = re.compile(r"(?:->|\.)\s*([A-Z][A-Za-z0-9_]*)\s*\(")
RAW_HEAP = re.compile(r"\b(malloc|calloc|realloc|free|strdup|strndup|aligned_alloc|"
                      r"posix_memalign)\s*\(")
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
STRING = re.compile(r'"(?:\\.|[^"\\])*"')
# The counted allocator is the one place that may call the C heap.
HEAP_OWNER = "common.c"


def _code(text: str) -> str:
    return STRING.sub('""', COMMENT.sub(" ", text))


def uncounted_ort_calls(text: str) -> list[str]:
    """Capitalized member calls outside the EBE_CALL macros' own definitions."""
    found = []
    for line in _code(text).splitlines():
        if line.lstrip().startswith("#define EBE_CALL"):
            continue
        found += MEMBER_CALL.findall(line)
    return found


def raw_heap_calls(text: str) -> list[str]:
    return RAW_HEAP.findall(_code(text))


def _sources() -> list[Path]:
    files = sorted(SOURCE_DIR.glob("*.c")) + sorted(SOURCE_DIR.glob("*.h"))
    assert files, f"no engine sources in {SOURCE_DIR}"
    return files


def test_every_ort_call_goes_through_the_counting_macro() -> None:
    offenders = {p.name: calls for p in _sources() if (calls := uncounted_ort_calls(p.read_text()))}
    assert offenders == {}


def test_the_scan_catches_an_uncounted_call() -> None:
    assert uncounted_ort_calls("x = api->ReleaseStatus(st);") == ["ReleaseStatus"]
    assert uncounted_ort_calls("x = (*api).GetTensorData(v, &p);") == ["GetTensorData"]
    assert uncounted_ort_calls("EBE_CALL(c, api, GetTensorData, v, &p);") == []
    assert uncounted_ort_calls("/* api->ReleaseStatus(st) */ int x;") == []


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
