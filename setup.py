"""Build hook: compile the bundled engine into the installed `engine` package.

All metadata lives in pyproject.toml; this file only adds the C build to `build_py`, so
`pip install .` (and a wheel build) ship engine/libepbench_engine.so. Editable installs
skip it: `make engine` builds the library in place next to engine/__init__.py.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent


class BuildPyWithEngine(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        # Load engine/build.py by path: the package's __init__ is not importable here
        # (its dependencies are not in the isolated build environment).
        spec = importlib.util.spec_from_file_location("_epbench_engine_build",
                                                      HERE / "engine" / "build.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        try:
            module.build(Path(self.build_lib) / "epbench" / "engine")
        except module.EngineBuildError as exc:
            raise SystemExit(f"error: {exc}") from None


class BinaryDistribution(Distribution):
    """The wheel carries a native library: tag it for the platform, not py3-none-any."""

    def has_ext_modules(self) -> bool:
        return True


setup(cmdclass={"build_py": BuildPyWithEngine}, distclass=BinaryDistribution)
