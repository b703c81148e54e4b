"""Base vs PR: a verdict per case, judged against a per-case threshold from A/A noise.

Two shapes of input:
- one run with both arms (`compare RUN.json --base ARM --pr ARM`): the change is
  PR / base per round (the rounds are paired); when the run's A/A twin copies base and
  the PR arm has a library file of its own, PR / the geometric mean of base and twin,
  two copies of base (second_replicate);
- two runs (`compare BASE.json PR.json`): the change is the double ratio
  (PR / its in-run control) / (base / its in-run control), so machine speed cancels,
  within limits: a case whose runs' controls ran more than CONTROL_SHIFT_LIMIT apart
  is ❔ unless its interval clears the threshold by more than the allowance its shift
  gives (findings.speed_allowance, growing with the shift: a machine's speed does not
  change every case's time alike).

Per case the threshold is t = max(floor, k x noise), noise from the host's
calibration profile and the run's A/A twin (k x the twin's standard error; the
larger of the two), or a conservative default, said out loud. The A/A variance the
twins show beyond their own standard errors, pooled over the grid (tau^2) and at
least the case's own, is added to every case's standard error (a one-process case's
too). Verdicts test interval nulls, Benjamini-Hochberg
across the grid (judge_grid):

  🔴 alert        BH rejects "change <= alert level" (2t), and "within +-t"
  ⚠️ regression   BH rejects "within +-t" above; also a would-be alert with unquiet
                 rounds whose quiet rounds alone do not make one (held back from 🔴)
  🟢 improvement  BH rejects "within +-t" below
  ✅ no change    the whole CI lies within +-t
  ❔ inconclusive anything else (the CI straddles a threshold); between two runs, a
                 case whose runs' controls ran too far apart in speed, unless its
                 interval clears the threshold by the allowance its shift gives
  ❌ failed       the PR side failed, crashed or did not verify
  ➖ not comparable  the base side failed, or too few rounds on a side

A verdict only gets stronger as the change grows: quiet rounds can make a would-be
alert 🔴 or leave it ⚠️, never weaker. The intervals shown for selected cases (⚠️ 🔴
🟢) are FCR-adjusted (Benjamini-Yekutieli 2005). docs/validation/statistics.md has the
simulations behind each rule.
A deterministic counter that changed is reported whatever the noise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

from epbench.core.model import Case, Results
from epbench.core.results import load_results
from epbench.reports import nested, stats
from epbench.reports.calibrate import default_profile_path, load_profile, profile_noise
from epbench.reports.comparison import (
    SEVERITY,
    VERDICTS,
    BetweenRuns,
    CaseRow,
    CompareError,
    Comparison,
    Gate,
    Profile,
    ProfileInfo,
    Rerun,
    RoundMedians,
    Settings,
    Side,
    SideInfo,
)
from epbench.reports.families import family_changes
from epbench.reports.findings import (
    across_speed_change,
    cannot_catch,
    control_shift,
    counter_changes,
    drift_warning,
    flag_bar,
    instructions_change,
    median_ns,
    named,
    speed_warning,
    target_warnings,
    twin_over_target,
    within_only_warning,
    within_run_only,
)
from epbench.reports.run_noise import (
    TWIN_REPLICATE_SHARE,
    between_run_variance,
    replicate_reference,
    second_replicate,
    twin_noise,
    twin_sides,
    with_twin,
)
from epbench.reports.summary import family_of, gate_summary
from epbench.reports.verdicts import (
    GridSamples,
    default_threshold_text,
    grid_detectable,
    judge_samples,
    kept_detectable,
    overall_verdict,
    threshold_for,
)


def choose_arms(
    base: Results, pr: Results, base_arm: str | None, pr_arm: str | None
) -> tuple[str, str]:
    def only_candidate(doc: Results, label: str) -> str:
        others = [a for a in doc.arms if a != doc.control]
        if len(others) != 1:
            raise CompareError(
                f"the {label} file has arms {sorted(doc.arms)}: "
                f"say which to compare with --{label} ARM (or --arm ARM for both)"
            )
        return others[0]

    return base_arm or only_candidate(base, "base"), pr_arm or only_candidate(pr, "pr")


def _require_arm(doc: Results, arm: str, label: str, option: str | None = None) -> None:
    if arm not in doc.arms:
        raise CompareError(
            f"arm {arm!r} is not in the {label} results (it has {sorted(doc.arms)}); "
            f"pass {option or '--' + label} with one of those keys"
        )


def compare_files(
    paths: Sequence[str],
    *,
    base_arm: str | None = None,
    pr_arm: str | None = None,
    arm: str | None = None,
    settings: Settings | None = None,
    profile_path: str | None = None,
) -> Comparison:
    """`epbench compare`: load one file (two arms) or two (base, PR), pick the arms and the
    profile, and compare. Raises CompareError with a remedy for any unusable input."""
    from pathlib import Path

    if not 1 <= len(paths) <= 2:
        raise CompareError("compare takes one results file (with --base/--pr) or two (BASE PR)")
    if arm and (base_arm or pr_arm):
        raise CompareError("give either --arm or --base/--pr, not both")
    if len(paths) == 1:
        return compare_run(paths[0], base_arm=base_arm, pr_arm=pr_arm, settings=settings,
                           profile_path=profile_path)[1]
    warnings: list[str] = []
    base_doc, pr_doc = load_results(paths[0]), load_results(paths[1])
    if arm:
        _require_arm(base_doc, arm, "base", "--arm")
        _require_arm(pr_doc, arm, "pr", "--arm")
    chosen = choose_arms(base_doc, pr_doc, base_arm or arm, pr_arm or arm)
    base = Side("base", base_doc, chosen[0], paths[0])
    pr = Side("pr", pr_doc, chosen[1], paths[1])
    if Path(paths[0]).resolve() == Path(paths[1]).resolve() or base_doc == pr_doc:
        warnings.append(
            "base and PR are the same results: every change is exactly 0 by construction, "
            "so this says nothing about noise or regressions; compare two runs"
        )
    profile = load_profile_for(base.host_key, profile_path)
    comparison = compare(base, pr, settings=settings, profile=profile)
    return replace(comparison, warnings=(*warnings, *comparison.warnings))


def compare_run(
    path: str,
    *,
    base_arm: str | None,
    pr_arm: str | None,
    settings: Settings | None = None,
    profile_path: str | None = None,
) -> tuple[Results, Comparison]:
    """One results file, two of its arms: the run (read once) and its comparison, for
    `compare RUN.json --base ARM --pr ARM` and its --out-dir (reports.outputs)."""
    if not (base_arm and pr_arm):
        raise CompareError(
            "one results file needs both arms: epbench compare RUN.json --base ARM --pr ARM"
        )
    doc = load_results(path)
    base, pr = Side("base", doc, base_arm, path), Side("pr", doc, pr_arm, path)
    profile = load_profile_for(base.host_key, profile_path)
    return doc, with_reruns(compare(base, pr, settings=settings, profile=profile), doc)


def with_reruns(comparison: Comparison, results: Results,
                kept: Mapping[str, float] | None = None) -> Comparison:
    """`comparison` with the re-runs of the one run it judged: every case of `results`
    that a re-run added rounds to, with its re-run count, its rounds in all and the
    detectable change `kept` from the pass that re-ran it on ❔ (compare's `kept`). The
    one place compare, compare-commits and the action's merge say which cases were re-run.
    Without ``kept`` (a run judged again from its results, which do not keep it), a note
    says that its re-run cases state the final pass's figure."""
    reruns = {name: Rerun(reruns=case.reruns, rounds=len(case.rounds),
                          kept=(kept or {}).get(name))
              for name, case in results.cases.items() if case.reruns}
    warnings = comparison.warnings
    if kept is None and reruns:
        warnings = (*warnings, REJUDGED_RERUNS)
    return replace(comparison, reruns=reruns, warnings=warnings)


# A re-run run judged again: compare-commits' floor on a re-run ❔ case's statement is lost.
REJUDGED_RERUNS = ("judged again from a run's results: a case compare-commits re-ran because "
                   "it was ❔ states the last pass's \"could catch\" here, which can be smaller "
                   "than the one compare-commits stated (its compare.json keeps that)")


def _check_comparable(base: Side, pr: Side, settings: Settings, warnings: list[str]) -> None:
    if base.doc.schema != pr.doc.schema:
        raise CompareError(
            f"different results schema versions: base {base.doc.schema!r}, "
            f"pr {pr.doc.schema!r}; load both with the same epbench (it migrates "
            "older files) or re-run the older side"
        )
    if base.host_key != pr.host_key:
        message = (
            f"base and PR were measured on different hosts ({base.host_key} vs {pr.host_key}); "
            "their times are not comparable"
        )
        if not settings.force:
            raise CompareError(message + ": re-run both on one machine, or pass --force")
        warnings.append(message + " (compared anyway because of --force; treat with suspicion)")
    slices = (base.doc.config.block_slices, pr.doc.config.block_slices)
    if slices[0] != slices[1]:
        warnings.append(
            f"base and PR cut their blocks into different numbers of slices ({slices[0]} vs "
            f"{slices[1]}): how often the arms alternate can move their ratio to the control; "
            "re-run the older side with the other's --slices"
        )
    for side in (base, pr):
        if side.control not in side.doc.arms:
            raise CompareError(
                f"the {side.label} results lack their control arm {side.control!r}; "
                "re-run with `epbench run` (it always adds the ort control)"
            )


def _load_profile_noise(
    profile: Profile | None, host_key: str | None, slices: int, settings: Settings,
    warnings: list[str],
) -> Profile | None:
    if profile is None:
        return None
    if profile.get("host_key") != host_key:
        message = (
            f"the noise profile was calibrated on host {profile.get('host_key')}, "
            f"these results come from {host_key}"
        )
        if not settings.force:
            raise CompareError(message + ": run `epbench calibrate` on this host, or pass --force")
        warnings.append(message + " (used anyway because of --force)")
    # Profiles older than slicing have no key: they were timed with whole blocks.
    calibrated, measured = profile.get("block_slices", 1), slices
    if calibrated != measured:
        warnings.append(
            f"the noise profile was calibrated with {calibrated} slice(s) per block, these "
            f"results were timed with {measured}: its noise figures "
            f"{'overstate' if calibrated < measured else 'understate'} this run's; "
            "re-run `epbench calibrate`"
        )
    return profile


def _case_noise(
    profile: Profile | None, name: str, definition: str | None, rounds: int, mode: str
) -> tuple[float | None, str]:

    if profile is None:
        return None, "no profile"
    return profile_noise(profile, name, definition, rounds, mode)


def compare(
    base: Side,
    pr: Side,
    *,
    settings: Settings | None = None,
    profile: Profile | None = None,
    kept: Mapping[str, float] | None = None,
) -> Comparison:
    """Compare two sides (the same document for a same-run comparison) case by case.

    Returns the comparison that render.py turns into markdown or text, and
    Comparison.to_json into compare.json. ``kept``: per case compare-commits re-ran
    because it was ❔, the detectable change the pass that re-ran it stated, the least
    its row states (verdicts.kept_detectable).
    Raises CompareError when the two sides cannot be compared honestly.
    """
    settings = settings or Settings()
    warnings: list[str] = []
    medians = RoundMedians()
    same_run = base.doc is pr.doc
    mode = "same-run" if same_run else "separate-runs"
    _require_arm(base.doc, base.arm, "base")
    _require_arm(pr.doc, pr.arm, "pr")
    if same_run and base.arm == pr.arm:
        raise CompareError(f"--base and --pr are both {base.arm!r}; name two different arms")
    _check_comparable(base, pr, settings, warnings)
    profile = _load_profile_noise(profile, base.host_key, pr.doc.config.block_slices,
                                  settings, warnings)
    has_twin = any(side.doc.twin for side in (base, pr))
    if profile is None and not has_twin:
        warnings.append(
            "no calibration profile for this host and no A/A twin in the run: every threshold "
            f"is the conservative default {default_threshold_text(settings)}; run with "
            "--aa-twin ARM, or `epbench calibrate`, to judge against measured noise"
        )

    for side in (base, pr) if not same_run else (pr,):
        if side.doc.interrupted:
            warnings.append(
                f"the {side.label} run was interrupted: cases it did not reach are missing "
                "or incomplete; rerun it to compare the whole grid"
            )
    base_cases = base.doc.cases
    pr_cases = pr.doc.cases
    common = [c for c in base_cases if c in pr_cases]
    only_base = sorted(c for c in base_cases if c not in pr_cases)
    only_pr = sorted(c for c in pr_cases if c not in base_cases)
    if not common:
        raise CompareError(
            "the two results share no case: run both sides on the same --grid or --case list"
        )
    changed = [
        c for c in common
        if base_cases[c].definition_sha256 != pr_cases[c].definition_sha256
    ]
    if changed:
        raise CompareError(
            f"case definitions differ between base and PR for {', '.join(changed)} "
            "(different model or inputs, so different work); re-run both sides with one "
            "epbench version"
        )

    rows: list[CaseRow] = []
    measurable: list[str] = []
    replicate = second_replicate(base, pr)
    pooled: list[bool] = []  # per measurable case: PR against the mean of base and twin
    log_pr: list[nested.ProcessSample] = []
    log_base: list[nested.ProcessSample] = []
    # The same over quiet rounds only, for cases with unquiet ones.
    quiet_pr: list[nested.ProcessSample] = []
    quiet_base: list[nested.ProcessSample] = []
    quiet_index: list[int] = []
    dropped: list[int] = []  # rounds without a usable time (zero, negative, missing), per case
    for name in common:
        b_case, p_case = base_cases[name], pr_cases[name]
        pre = _precheck(name, b_case, p_case, base, pr)
        if pre is not None:
            rows.append(pre)
            continue
        b_vals = medians(b_case, base.arm)
        p_vals = medians(p_case, pr.arm)
        p_quiet, b_quiet = stats.quiet_mask(p_case), stats.quiet_mask(b_case)
        p_proc = stats.round_labels(p_case, "process")
        b_proc = stats.round_labels(b_case, "process")
        if same_run:
            twin_vals = (medians(b_case, replicate)
                         if replicate is not None and replicate in b_case.arms else None)
            mean = replicate_reference(b_vals, twin_vals)
            pooled.append(mean is not None)
            ref = b_vals if mean is None else mean
            log_pr.append(nested.process_sample(p_vals, ref, p_proc))
            dropped.append(len(p_vals) - len(log_pr[-1]))
            if not p_quiet.all():
                quiet_pr.append(nested.process_sample(p_vals, ref, p_proc, p_quiet))
                quiet_index.append(len(measurable))
        else:
            p_ctrl = medians(p_case, pr.control)
            b_ctrl = medians(b_case, base.control)
            log_pr.append(nested.process_sample(p_vals, p_ctrl, p_proc))
            log_base.append(nested.process_sample(b_vals, b_ctrl, b_proc))
            dropped.append(len(p_vals) - len(log_pr[-1]) + len(b_vals) - len(log_base[-1]))
            if not (p_quiet.all() and b_quiet.all()):
                quiet_pr.append(nested.process_sample(p_vals, p_ctrl, p_proc, p_quiet))
                quiet_base.append(nested.process_sample(b_vals, b_ctrl, b_proc, b_quiet))
                quiet_index.append(len(measurable))
        measurable.append(name)
    twinned, unused = twin_sides(base, pr, same_run)
    if unused:
        warnings.append(unused)
    twins = twin_noise(twinned, measurable, settings, medians)
    # The A/A variance no process spread shows (a library copy's own bias), from the
    # twin's changes pooled over the grid and at least each case's own: added to every
    # case's standard error, one process or many.
    between: float | None = 0.0
    between_source = "one run"
    if not same_run:
        between, between_source = between_run_variance(profile, base, pr, measurable, settings,
                                                       medians)
        if between is None:
            warnings.append(within_only_warning(settings))
    shares = [TWIN_REPLICATE_SHARE if p else 1.0 for p in pooled] or [1.0] * len(measurable)
    extra = [share * v + (between or 0.0)
             for share, v in zip(shares, twins.extra, strict=True)]
    grid = GridSamples(log_pr, log_base, same_run, quiet_pr, quiet_base, quiet_index,
                       extra_variance=extra,
                       extra_df=max(1.0, len(measurable) - 1.0))
    changes = grid.changes(confidence=settings.confidence)
    thresholds, unquiet, n_rounds, drifts, shifts = [], [], [], [], []
    for name, change in zip(measurable, changes, strict=True):
        b_case, p_case = base_cases[name], pr_cases[name]
        noise, source = _case_noise(
            profile, name, b_case.definition_sha256, max(change.n, 1), mode
        )
        noise, source = with_twin(noise, source, twins.noise.get(name))
        thresholds.append(threshold_for(noise, source, settings))
        u = int((~stats.quiet_mask(p_case)).sum())
        r = len(p_case.rounds)
        if not same_run:
            u += int((~stats.quiet_mask(b_case)).sum())
            r += len(b_case.rounds)
        unquiet.append(u)
        n_rounds.append(r)
        drift = [stats.control_drift(medians(p_case, pr.control))]
        if not same_run:
            drift.append(stats.control_drift(medians(b_case, base.control)))
        finite = [d for d in drift if math.isfinite(d)]
        drifts.append(max(finite, key=abs) if finite else None)
        shifts.append(None if same_run else control_shift(
            medians(b_case, base.control), medians(p_case, pr.control)))
    judgements, tests = judge_samples(grid, thresholds, unquiet, n_rounds, settings,
                                      dropped=dropped, changes=changes)
    # The twin's own A/A change per case, the larger of two runs' (--target-mde).
    twin_aa: dict[str, float] = {}
    for side in twins.info:
        for name, aa in side.cases.items():
            if (aa.change is not None and math.isfinite(aa.change)
                    and abs(aa.change) >= abs(twin_aa.get(name, 0.0))):
                twin_aa[name] = aa.change
    bars = [flag_bar(th.t, shift, between is None, settings)
            for th, shift in zip(thresholds, shifts, strict=True)]
    detectable = [kept_detectable(mde, (kept or {}).get(name)) for name, mde in zip(
        measurable, grid_detectable(changes, judgements, tests, bars, settings, same_run),
        strict=True)]
    for name, change, th, j, u, r, drift, shift, p_beyond, mde in zip(
        measurable, changes, thresholds, judgements, unquiet, n_rounds, drifts, shifts,
        tests.beyond, detectable, strict=True,
    ):
        j = across_speed_change(j, change, th, shift)
        if between is None:
            j = within_run_only(j, j.shown or change, settings)
        j = twin_over_target(j, twin_aa.get(name), settings)
        b_vals = medians(base_cases[name], base.arm)
        p_vals = medians(pr_cases[name], pr.arm)
        # A ➖ row was not judged: it shows no change or interval that could be misread.
        # A selected case shows its FCR-adjusted interval (judge_grid).
        shown = (j.shown or change) if j.verdict != "not_comparable" else stats.NAN_CHANGE
        level = j.level if j.shown is not None else settings.confidence
        rows.append(CaseRow(
            case=name, verdict=j.verdict, emoji=VERDICTS[j.verdict][0], reason=j.reason,
            base_ns=median_ns(b_vals), pr_ns=median_ns(p_vals),
            change=stats.finite(shown.ratio - 1.0),
            ci=(stats.finite(shown.lo - 1.0), stats.finite(shown.hi - 1.0)),
            p=stats.finite(p_beyond if j.verdict != "not_comparable" else math.nan),
            q=stats.finite(j.q), significant=j.significant,
            ci_level=level, held_back=j.held_back,
            threshold=th.t, alert=th.alert, noise=th.noise, noise_source=th.source,
            rounds=r, unquiet=u, control_drift=drift,
            drift_exceeds_threshold=drift is not None and abs(drift) > th.t,
            control_shift=shift,
            family=_family(base_cases[name]),
            detectable=stats.finite(mde) if j.verdict != "not_comparable" else None,
        ))
    rows = [_after_the_verdict(row, base, pr, settings) for row in rows]
    rows.sort(key=lambda row: (SEVERITY[row.verdict], -(row.change or 0.0), row.case))
    counters = counter_changes(base, pr, common)
    families = family_changes(base, pr, rows, settings, medians)
    overall = overall_verdict(rows)
    drift = drift_warning(rows)
    if drift is not None:
        warnings.append(drift)
    if settings.target_mde is not None:
        warnings.extend(target_warnings(rows, settings.target_mde, budget=False))
    speed = speed_warning(rows)
    if speed is not None:
        warnings.insert(0, speed)
    if twins.flagged:
        warnings.insert(0,
            "the run's A/A twin differs from the arm it copies beyond the threshold on "
            f"{named(twins.flagged)}: one arm measured twice came out apart, so "
            "this run's verdicts are not to be trusted; rerun (more --processes), on a "
            "quieter machine")
    return Comparison(
        mode=mode,
        twin=tuple(replace(t, replicate=replicate is not None and t.key == replicate)
                   for t in twins.info),
        between_runs=BetweenRuns(sd=None if between is None else math.sqrt(between),
                                 source=between_source),
        base=_side_info(base),
        pr=_side_info(pr),
        settings=settings,
        profile=_profile_info(profile),
        warnings=tuple(warnings),
        overall=overall,
        counts={v: sum(r.verdict == v for r in rows) for v in VERDICTS},
        cases=tuple(rows),
        only_base=tuple(only_base),
        only_pr=tuple(only_pr),
        counters=tuple(counters),
        families=tuple(families),
        gate={"base": _gate(base.doc), "pr": _gate(pr.doc)} if not same_run
        else {"run": _gate(pr.doc)},
        host=pr.doc.host.to_dict(),
        threads=pr.doc.config.threads,
        cannot_catch=tuple(cannot_catch(
            base, pr, rows, profile=profile is not None, twin=bool(twins.info),
            unmodelled_sd=math.sqrt(twins.tau2),
            between_sd=math.sqrt(between) if between else None, settings=settings,
            shared=bool(twins.info) and all(t.shared_library for t in twins.info))),
    )


def _after_the_verdict(row: CaseRow, base: Side, pr: Side, settings: Settings) -> CaseRow:
    """A row with what does not judge it: failed re-runs and the instruction count."""
    errors = [*base.doc.cases[row.case].rerun_errors]
    if base.doc is not pr.doc:
        errors += pr.doc.cases[row.case].rerun_errors
    change = instructions_change(base, pr, row.case)
    return replace(
        row, rerun_errors=tuple(str(e) for e in errors), instructions_change=change,
        instructions_flag=change is not None and abs(change) >= settings.instructions_threshold,
    )


def _gate(doc: Results) -> Gate:
    return gate_summary(doc)


def _family(case: Case) -> str | None:
    return family_of(case.spec)


def _precheck(
    name: str, b_case: Case, p_case: Case, base: Side, pr: Side
) -> CaseRow | None:
    """A row for a case that cannot be measured (failed side, arm missing), else None."""
    def problem(case: Case, side: Side) -> str | None:
        if not case.ok:
            return f"{side.label} {case.status}: {case.error or 'no detail'}"
        info = case.arms.get(side.arm)
        if info is None:
            return f"{side.label} did not run arm {side.arm!r} on this case"
        if not info.verified:
            return f"{side.label} arm {side.arm!r} did not verify against ORT"
        return None

    pr_problem = problem(p_case, pr)
    base_problem = problem(b_case, base)
    if pr_problem is None and base_problem is None:
        return None
    verdict = "failed" if pr_problem is not None and base_problem is None else "not_comparable"
    reason = "; ".join(p for p in (pr_problem, base_problem) if p)
    return CaseRow(
        case=name, verdict=verdict, emoji=VERDICTS[verdict][0], reason=reason,
        base_ns=None, pr_ns=None, change=None, ci=(None, None), p=None, q=None,
        significant=False, threshold=math.nan, alert=math.nan, noise=math.nan,
        noise_source="-", rounds=len(p_case.rounds), unquiet=0, control_drift=None,
        held_back=False, family=_family(b_case),
    )


# --------------------------------------------------------------------------- context


def _side_info(side: Side) -> SideInfo:
    arm = side.doc.arms.get(side.arm)
    return SideInfo(
        path=side.path, arm=side.arm, spec=arm.spec if arm else None,
        sha256=arm.sha256 if arm else None, ep_name=arm.ep_name if arm else None,
        control=side.control, rounds=side.doc.config.rounds,
        arms=tuple(sorted(side.doc.arms)), created=side.doc.created,
        git_commit=side.doc.host.git_commit,
        host_key=side.host_key, interrupted=bool(side.doc.interrupted),
    )


def _profile_info(profile: Profile | None) -> ProfileInfo | None:
    if profile is None:
        return None
    return ProfileInfo(**{k: profile.get(k) for k in  # type: ignore[arg-type]
                          ("path", "host_key", "created", "arm", "rounds", "repeats")})


def load_profile_for(host_key: str | None, path: str | None) -> Profile | None:
    """The calibration profile to judge with: --profile FILE, else the host's cached one."""

    if path is not None:
        return load_profile(path)
    if host_key is None:
        return None
    candidate = default_profile_path(host_key)
    return load_profile(candidate) if candidate.is_file() else None
