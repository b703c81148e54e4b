"""epbench: measure an ONNX Runtime plugin execution provider against ORT's CPU EP.

One installed package, so the names of its parts (`epbench.harness`, `epbench.reports`,
`epbench.cases`, `epbench.engine`) clash with no other distribution. In the repository
the parts keep their top-level folders, mapped into the package by pyproject.toml
(`package-dir`; see docs/design.md, "No links").
"""
