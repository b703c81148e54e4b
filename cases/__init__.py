"""The case generator: named synthetic cases, grid files, user models.

Nothing here imports onnx, onnxruntime or numpy at import time.
"""

from epbench.cases.built import BuiltCase
from epbench.cases.catalog import describe_cases, write_cases
from epbench.cases.grids import case_by_name, grid_description, grid_names, load_grid
from epbench.cases.spec import CaseSpec, model_case

__all__ = [
    "BuiltCase",
    "CaseSpec",
    "case_by_name",
    "describe_cases",
    "grid_description",
    "grid_names",
    "load_grid",
    "model_case",
    "write_cases",
]
