"""epbench: measure an ONNX Runtime plugin execution provider against ORT's CPU EP.

One installed package, so the names of its parts (`epbench.harness`, `epbench.reports`,
`epbench.cases`, `epbench.engine`) clash with no other distribution. In the repository
the parts keep their top-level folders; `epbench/<part>` are links to them, which both
setuptools and import-linter follow (see docs/design.md, "Layers").
"""
