"""`epbench calibrate`: run A/A repeats of the grid and turn them into a noise profile.

The runs come from the harness; the profile (what the noise is, how it is stored and
read) is the reports' business (epbench.reports.calibrate).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from epbench.cases.spec import CaseSpec
from epbench.core.model import Results
from epbench.harness import run_config, runner
from epbench.harness.arms import ArmSpec, parse_arm
from epbench.reports import calibrate as noise
from epbench.reports import defaults as noise_defaults
from epbench.reports.comparison import JsonValue


def aa_arms(arm_spec: str) -> tuple[ArmSpec, ArmSpec]:
    """The two A/A arms for `arm_spec`: `ort` and a second ORT session, or the arm twice.

    The name goes into the spec string itself, because the worker re-parses specs.
    """
    arm = parse_arm(arm_spec)
    if arm.kind == "ort":
        return parse_arm("ort"), parse_arm("ort:name=ort_b")
    separator = "," if (arm.options or arm.name) else ":"
    name_a, name_b = noise.AA_NAMES
    return (parse_arm(f"{arm.spec}{separator}name={name_a}"),
            parse_arm(f"{arm.spec}{separator}name={name_b}"))


def calibrate(
    cases: Sequence[CaseSpec],
    *,
    arm: str = "ort",
    repeats: int = noise_defaults.CALIBRATION_REPEATS,
    rounds: int | None = None,  # default: the run's default round count
    seed: int = noise_defaults.SEED,
    position_test: bool = True,
    run: Callable[[run_config.RunConfig], Results] | None = None,
    gate_policy: str = run_config.RunConfig.gate_policy,
    progress: run_config.Progress | None = None,
    on_repeat: Callable[[int, int], None] | None = None,
) -> dict[str, JsonValue]:
    """Run A/A `repeats` times (plus the fixed-order self-test) and return the profile
    (the document `reports.calibrate.write_profile` writes).

    `run` is harness.runner.run unless a test injects a fake; `gate_policy` and
    `progress` go to every run.
    """
    rounds = run_config.defaults()["rounds"] if rounds is None else rounds
    if repeats < 1:
        raise noise.ProfileError(
            "--repeats must be at least 1 (5 or more gives a steadier profile)")
    if run is None:
        run = runner.run
    arm_a, arm_b = aa_arms(arm)
    total = repeats + (1 if position_test else 0)
    docs = []
    for i in range(repeats):
        if on_repeat is not None:
            on_repeat(i, total)
        config = run_config.RunConfig(
            cases=tuple(cases), arms=(arm_a, arm_b), rounds=rounds, seed=seed + i,
            fixed_order=False, out_dir=None, gate_policy=gate_policy, progress=progress,
        )
        docs.append(run(config))
    fixed_doc = None
    if position_test:
        if on_repeat is not None:
            on_repeat(repeats, total)
        fixed_doc = run(run_config.RunConfig(
            cases=tuple(cases), arms=(arm_a, arm_b), rounds=rounds, seed=seed + repeats,
            fixed_order=True, out_dir=None, gate_policy=gate_policy, progress=progress,
        ))
    return noise.profile_from_runs(docs, fixed_doc, arm_a.key, arm_b.key, arm_spec=arm,
                                   seed=seed)
