"""Synthetic results documents with a known truth, for checking the statistics.

Noise model (per case; stated here once, used by the tests and quoted in reports'
tests): the per-round median of arm `a` in round `r` is

    true_ns[a] * session[a] * machine[r] * exp(N(0, arm_sigma)) * (1 + spike)

where `machine[r] = exp(N(0, machine_sigma))` is shared by every arm of the round
(a shared runner speeding up and slowing down between rounds; it cancels in
ratios within a round), `session[a] = exp(N(0, session_sigma))` is drawn once per
arm per run (two ORT sessions of one model differ by a stable ~1 % for the whole
run; it does not cancel and more rounds do not shrink it), the log-normal term
is each arm's own block-to-block
noise, and with probability `spike_prob` a block is hit by interference and
made `spike` = U(5 %, 30 %) slower. `drift` scales the whole run linearly from
1 at the first round to 1 + drift at the last. With `processes` > 1 the rounds are
split into that many consecutive processes and each arm gets, per process, a layout
offset `exp(N(0, process_sigma))` on top (fixed for the process's life: it does not
cancel in a process's ratios and more rounds do not shrink it; only more processes do).
Each block holds `samples` values spread +-0.5 % around its median.

The documents follow the results schema of epbench/core/results.py exactly, so every
reports module can run on them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from epbench.core.model import Results
from epbench.core.numbers import block_summary
from epbench.core.results import SCHEMA
from epbench.reports.history import changepoints


@dataclass(frozen=True)
class NoiseModel:
    machine_sigma: float = 0.03
    arm_sigma: float = 0.015
    spike_prob: float = 0.05
    spike_lo: float = 0.05
    spike_hi: float = 0.30
    drift: float = 0.0
    # Per-session offset (sigma of log). 0 unless asked for, so a model built from its
    # other fields means what it says; REALISTIC has one.
    session_sigma: float = 0.0
    # Per-process layout offset (sigma of log) per arm; 0 unless asked for.
    process_sigma: float = 0.0


# 0.7 % per session gives two sessions a ~1 % typical difference (sd 1 %), the size
# seen between real ORT sessions of one model.
REALISTIC = NoiseModel(session_sigma=0.007)


def round_values(
    true_ns: Mapping[str, float],
    rounds: int,
    rng: Any,
    noise: NoiseModel = REALISTIC,
    processes: Any = None,
) -> dict[str, Any]:
    """Per-round medians per arm (numpy arrays) under the noise model.

    `processes` (per round, the process it ran in) adds the per-process offsets.
    """
    import numpy as np

    machine = np.exp(rng.normal(0.0, noise.machine_sigma, rounds))
    machine *= 1.0 + noise.drift * np.linspace(0.0, 1.0, rounds)
    out = {}
    for arm, ns in true_ns.items():
        own = np.exp(rng.normal(0.0, noise.arm_sigma, rounds))
        spikes = rng.random(rounds) < noise.spike_prob
        spike = np.where(spikes, rng.uniform(noise.spike_lo, noise.spike_hi, rounds), 0.0)
        # No draw without an offset: a model without one keeps its seeded values.
        session = np.exp(rng.normal(0.0, noise.session_sigma)) if noise.session_sigma else 1.0
        out[arm] = ns * session * machine * own * (1.0 + spike)
        if noise.process_sigma and processes is not None:
            offsets = np.exp(rng.normal(0.0, noise.process_sigma, int(np.max(processes)) + 1))
            out[arm] = out[arm] * offsets[np.asarray(processes)]
    return out


def case_spec(name: str, **fields: Any) -> dict[str, Any]:
    """A CaseSpec.to_dict()-shaped spec; chain names like relu_d10_w8 fill op/depth/width."""
    spec: dict[str, Any] = {
        "name": name, "kind": "model", "op": None, "depth": None, "width": None,
        "dynamic": name.endswith("_dyn"), "m": None, "k": None, "n": None, "path": None,
        "dims": [], "tolerance": 0.0, "opt_level": "all", "seed": 0, "batch": 1,
    }
    parts = name.removesuffix("_dyn").split("_")
    if len(parts) == 3 and parts[1].startswith("d") and parts[2].startswith("w"):
        op = parts[0].capitalize()
        spec.update(
            kind="binary" if op in ("Add", "Mul") else "chain",
            op=op, depth=int(parts[1][1:]), width=int(parts[2][1:]),
        )
    elif parts[0] == "matmul" and len(parts) == 2:
        m, n = (int(v) for v in parts[1].split("x"))
        spec.update(kind="matmul", op="MatMul", m=1, k=m, n=n)
    spec.update(fields)
    return spec


def results_doc(
    cases: Mapping[str, Mapping[str, float]],
    *,
    rounds: int = 30,
    seed: int = 0,
    noise: NoiseModel = REALISTIC,
    samples: int = 5,
    unquiet_rounds: Mapping[str, Sequence[int]] | None = None,
    counters: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None,
    status: Mapping[str, str] | None = None,
    host_key: str = "host0001",
    definition: Mapping[str, str] | None = None,
    arm_specs: Mapping[str, str] | None = None,
    control: str = "ort",
    processes: int = 1,
    twin: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A results document: `cases[case][arm]` is the true ns per Run of that arm.

    `processes` splits the rounds into that many consecutive worker processes (see the
    noise model); `twin` ({"of": arm, "key": twin}) marks an arm as another's A/A twin.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    arm_keys: list[str] = []
    for per_arm in cases.values():
        arm_keys.extend(a for a in per_arm if a not in arm_keys)
    arm_specs = dict(arm_specs or {})
    arms = {
        key: {
            "key": key,
            "kind": "ort" if key.startswith("ort") else "plugin",
            "spec": arm_specs.get(key, key),
            "library": None if key.startswith("ort") else f"/lib/{key}.so",
            "sha256": None if key.startswith("ort") else "ab" * 32,
            "ep_name": "CPUExecutionProvider" if key.startswith("ort") else key,
            "ep_version": None,
            "registration_name": None if key.startswith("ort") else key,
            "options": {},
        }
        for key in arm_keys
    }
    out_cases: dict[str, Any] = {}
    for name, true_ns in cases.items():
        spec = case_spec(name)
        process_of = (np.arange(rounds) * processes) // rounds
        values = round_values(true_ns, rounds, rng, noise, process_of)
        unquiet = set((unquiet_rounds or {}).get(name, ()))
        n_nodes = spec["depth"] or 1
        case_status = (status or {}).get(name, "ok")
        rounds_out = []
        for r in range(rounds):
            order = [arm_keys[(r + i) % len(arm_keys)] for i in range(len(arm_keys))]
            order = [a for a in order if a in true_ns]
            quiet = r not in unquiet
            spread = np.linspace(-0.005, 0.005, samples)
            rounds_out.append({
                "index": r,
                "process": int(process_of[r]),
                "session": r % 2,
                "order": order,
                "quiet": quiet,
                "gate": {
                    "passed": quiet, "idle": {"cpu0": 0.99 if quiet else 0.5},
                    "steal": {"cpu0": 0.0 if quiet else 0.02},
                    "waited_s": 0.0, "attempts": 1,
                },
                "interference": {"idle": {"cpu1": 0.98}, "steal": {"cpu1": 0.0}},
                "summary_ns": {
                    arm: block_summary(int(round(v)) for v in values[arm][r] * (1.0 + spread))
                    for arm in true_ns
                },
            })
        out_cases[name] = {
            "spec": spec,
            "definition_sha256": (definition or {}).get(name, f"def-{name}"),
            "status": case_status,
            "error": None if case_status == "ok" else f"{case_status}: synthetic",
            "signal": 11 if case_status == "crashed" else None,
            "core": 1,
            "arms": {
                arm: {
                    "nodes_executed": n_nodes,
                    "nodes_by_ep": {arms[arm]["ep_name"]: n_nodes},
                    "verified": case_status == "ok",
                    "max_abs_error": 0.0,
                    "block_iters": samples,
                    "counters_per_run": (
                        dict(counters[name][arm])
                        if counters and name in counters and arm in counters[name] else None
                    ),
                }
                for arm in true_ns
            },
            "rounds": rounds_out if case_status == "ok" else [],
            "processes": [
                {"index": p, "status": case_status, "error": None, "error_kind": None,
                 "signal": None, "core": 1, "rounds": int((process_of == p).sum()),
                 "planned": int((process_of == p).sum())} for p in range(processes)
            ],
            "lost_rounds": 0,
            "overhead": None,
        }
    return {
        "schema": SCHEMA,
        "created": "2026-01-01T00:00:00Z",
        "host": {
            "cpu_model": "Synthetic CPU @ 2.0GHz", "logical_cores": 2, "allowed_cores": [0, 1],
            "kernel": "6.1.0", "python": "3.11.0", "onnxruntime": "1.32.0", "numpy": "2.4.6",
            "governor": "performance", "smt": False, "git_commit": "0" * 40, "key": host_key,
        },
        "config": {
            "rounds": rounds, "processes": processes, "sessions": 2,
            "rounds_per_process": -(-rounds // processes), "keep_samples": False,
            "block_target_ms": 20.0, "max_block_iters": 1000,
            "warmup_ms": 100.0, "seed": seed, "fixed_order": False,
            "threads": 1, "gate": {"policy": "wait", "threshold": 0.93},
            "allow_fallback": False, "grids": [], "case_names": list(cases),
        },
        "arms": arms,
        "control": control,
        "twin": dict(twin) if twin else None,
        "overhead": None,
        "cases": out_cases,
        "interrupted": False,
    }


def paired_log_ratios(
    rows: int, rounds: int, rng: Any, noise: NoiseModel = REALISTIC, effect: Any = 0.0
) -> Any:
    """Per-round log(PR / base) of `rows` independent cases under the noise model, vectorized.

    The machine factor is shared by both arms of a round and cancels; what is left
    is each arm's own noise and spikes and the two sessions' offsets (one per row).
    `effect` (scalar or per row) is the true change.
    """
    import numpy as np

    def arm() -> Any:
        own = rng.normal(0.0, noise.arm_sigma, (rows, rounds))
        spikes = rng.random((rows, rounds)) < noise.spike_prob
        spike = np.where(spikes, rng.uniform(noise.spike_lo, noise.spike_hi, (rows, rounds)), 0.0)
        if not noise.session_sigma:
            return own + np.log1p(spike)
        return own + np.log1p(spike) + rng.normal(0.0, noise.session_sigma, (rows, 1))

    true = np.log1p(np.broadcast_to(np.asarray(effect, dtype=np.float64), (rows,)))
    return arm() - arm() + true[:, None]


# Noise of one history point (log of a run's ratio to its in-run control), between
# runs: a Student-t with HISTORY_DF degrees of freedom (heavier tails than normal:
# now and then a run lands on a bad memory layout) scaled to a standard deviation of
# HISTORY_SIGMA, the spread of engine/ORT ratios between separate quick-grid runs on
# the project's 2-core machine (pooled over 6 cases; the between-process offsets a run
# cannot average away). docs/history.md has the data.
HISTORY_SIGMA = 0.024
HISTORY_DF = 5


def history_series(rows: int, length: int, rng: Any, *, sigma: float = HISTORY_SIGMA,
                   df: float = HISTORY_DF, step: float = 0.0, at: int | None = None) -> Any:
    """`rows` synthetic history series of log ratios, with a step of `step` from index `at`.

    Points are independent (each is a separate run); the noise is t(df) scaled to sd
    `sigma`. The level before the step is 0 (an arm as fast as the control).
    """

    scale = sigma / math.sqrt(df / (df - 2.0)) if df > 2 else sigma
    z = rng.standard_t(df, (rows, length)) * scale
    if step and at is not None:
        z[:, at:] += math.log1p(step)
    return z


def change_point_rates(rows: int, length: int, *, step: float = 0.0, at: int | None = None,
                       sigma: float = HISTORY_SIGMA, df: float = HISTORY_DF, seed: int = 0,
                       runs_per_commit: int = 1, within: int = 5,
                       **detect: Any) -> dict[str, float]:
    """How e-divisive does on `rows` synthetic series: detection and false change points.

    With `runs_per_commit` > 1 each point is the median of that many runs' log ratios,
    as reports.history.changes.series makes a commit measured several times.

    A step counts as found when a change point lies within `within` points of `at`;
    every other change point is false. Returns {"found": share of series,
    "false_per_1000": false change points per 1000 points}. `detect` goes to
    reports.history.changepoints.e_divisive (significance, permutations, min_segment).
    """
    import numpy as np

    rng = np.random.default_rng([seed, rows, length, runs_per_commit])
    z = np.median(np.stack([history_series(rows, length, rng, sigma=sigma, df=df, step=step,
                                           at=at) for _ in range(runs_per_commit)]), axis=0)
    found = false = 0
    for row in z:
        cps = changepoints.e_divisive(row, **detect)
        near = [c for c in cps if at is not None and step and abs(c.index - at) <= within]
        found += bool(near)
        false += len(cps) - min(1, len(near))
    return {"found": found / rows, "false_per_1000": 1000.0 * false / (rows * length)}


_MODELS: dict[int, tuple[Any, Any, Any]] = {}


def typed_runner(fake: Callable[[Any], Mapping[str, Any]]) -> Callable[[Any], Results]:
    """A fake runner that makes synthetic documents, returning `Results` as
    harness.runner.run does."""
    return lambda config: Results.from_dict(fake(config), source="a fake run")


def as_results(doc: Any) -> Any:
    """The typed model of a synthetic (dict) document, for the reports' functions.

    One dict gives one model object while its content is unchanged, so two sides built
    from one document are still one run (compare tells a same-run comparison by
    identity); a test that edits the dict afterwards gets a new model.
    """
    if isinstance(doc, Results):
        return doc
    held = _MODELS.get(id(doc))
    snapshot = json.dumps(doc, sort_keys=True, default=str)
    if held is not None and held[0] is doc and held[1] == snapshot:
        return held[2]
    model = Results.from_dict(doc, source="a synthetic document")
    _MODELS[id(doc)] = (doc, snapshot, model)
    return model
