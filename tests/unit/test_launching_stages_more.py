"""More launching stages as units over recorded runs: sensitivity, the grid's axis probes, the replay
and perf. No process starts."""
from pathlib import Path

import pytest

from kvtasks.records import Axis, Facts, Plan, Selection
from kvtasks.stages import StageResult, base_oracle
from kvtasks.stages.grid import stage as grid
from kvtasks.stages.grid.proof import AXIS_SENTINEL, SENTINEL, axis_probes
from kvtasks.stages import receipt as receipt_stage
from kvtasks.stages.perf import stage as perf
from kvtasks.stages.replay import stage as replay
from kvtasks.stages.sensitivity import stage as sensitivity
from tests.kit import RecordingLauncher, stage_context, target_run
from tests.receipts import receipt
from tests.kernel_repos import TESTS
from tests.recorded import BASE, HEAD, TARGET, after_both_sides, failing, passing, ready

SEEN = {"corrupted_calls": 2, "max_relative_error": 1.5, "tests_failed": [], "tests_failed_count": 0, "tests_green": [],
        "tests_green_count": 0, "corrupted_outside_tests": 0}


def corrupted(folder: Path, label: str, exit: int, **seen) -> object:
    """A corrupted run of the repository's tests as the probe reports it."""
    return target_run(folder, label, exit=exit, failures=2 if exit else 0,
                      receipt=receipt(route_calls={"kernels.scale:scale_rows": 2}, sensitivity={**SEEN, **seen}))


def sensitive(tmp_path: Path, head: dict, runs: dict) -> tuple[StageResult, RecordingLauncher]:
    ctx, launcher = after_both_sides(tmp_path, runs, head=head)
    return sensitivity.run(ctx), launcher


def test_a_suite_that_fails_corrupted_passes_and_its_run_is_seen_as_the_run_it_repeats(tmp_path):
    failed = corrupted(tmp_path, "head-sensitivity-tail", 1, tests_failed_count=2, tests_failed=["a", "b"])
    stage, launcher = sensitive(tmp_path, HEAD, {"head-sensitivity-tail": failed})
    side, asked = launcher.launched("head-sensitivity-tail")
    assert side == "head" and asked.seen_as == "head-repo" and asked.corruption["mode"] == "tail"
    assert stage.stage.status == "pass" and stage.stage.corrupted_run == "head-repo" and stage.findings == []


@pytest.mark.parametrize("head, base_exit, rule, severity", [
    ({**HEAD, TARGET: BASE[TARGET] + "\n# the PR's test change\n"}, 1, "sensitivity.lost-on-head", "should-fix"),
    ({TARGET: BASE[TARGET] + "\n# the PR's test change\n"}, 1, "sensitivity.lost-on-head", "blocker"),
    ({**HEAD, TARGET: BASE[TARGET] + "\n# the PR's test change\n"}, 0, "sensitivity.insensitive-on-base-too", "note"),
    (HEAD, None, "sensitivity.insensitive-untouched", "note"),
])
def test_a_suite_green_when_corrupted_is_blamed_by_what_base_s_same_run_did(tmp_path, head, base_exit, rule, severity):
    runs = {"head-sensitivity-tail": corrupted(tmp_path / "head", "head-sensitivity-tail", 0, tests_green_count=2)}
    if base_exit is not None:
        seen = {"tests_failed_count": 2} if base_exit else {"tests_green_count": 2}
        runs["base-sensitivity-tail"] = corrupted(tmp_path / "base", "base-sensitivity-tail", base_exit, **seen)
    stage, launcher = sensitive(tmp_path, head, runs)
    assert stage.stage.status == "fail"
    assert [(finding.rule, finding.severity) for finding in stage.findings] == [(rule, severity)]
    if base_exit is not None:
        side, asked = launcher.launched("base-sensitivity-tail")
        assert side == "base" and asked.seen_as == "base-repo"
        assert [evidence.name for evidence in stage.base_evidence] == ["base-sensitivity:tail"]
    else:
        assert "base-sensitivity-tail" not in launcher.labels


@pytest.mark.parametrize("head_probe, head_grid, status, rules", [
    (1, 1, "fail", [("grid.regression", "blocker")]),
    (1, 0, "pass", []),
    (0, 0, "skip", [("grid.channel-not-shown", "note")]),
])
def test_the_grid_rides_its_channel_proven_by_a_poisoned_run_and_is_judged_against_base_s(
        tmp_path, head_probe, head_grid, status, rules):
    plan = Plan(channel="env", rows=[["4", "16"], ["3", "13"]])
    earlier = {**ready(), "grid_channel": StageResult(name="grid_channel", facts=Facts(grid_plan=plan))}
    named = f"ValueError: invalid shape {SENTINEL}"
    runs = {"base-grid": passing(tmp_path, "base-grid"),
            "base-grid-probe": target_run(tmp_path, "base-grid-probe", exit=1, log=named),
            "head-grid-probe": target_run(tmp_path, "head-grid-probe", exit=head_probe, log=named if head_probe else ""),
            "head-grid": target_run(tmp_path, "head-grid", exit=head_grid, failures=head_grid, log="E AssertionError")}
    ctx, launcher = after_both_sides(tmp_path, runs, earlier=earlier, shape_env="SHAPES", grid="4,16;3,13", shape_vars="M,N")
    judged = grid.head(ctx)
    assert judged.stage.status == status and [(finding.rule, finding.severity) for finding in judged.findings] == rules
    # the grid itself runs only once the poisoned run proved the channel
    asked = [(side, launched.label, launched.env) for side, launched in launcher.asked
             if launched.label.startswith("head-grid")]
    assert asked == [("head", "head-grid-probe", (("SHAPES", f"{SENTINEL},{SENTINEL}"),))] + \
        ([("head", "head-grid", (("SHAPES", "4,16;3,13"),))] if head_probe else [])


@pytest.mark.parametrize("channel, probe_exit, base_state, rules, launched", [
    ("env", 0, "hook-not-consumed", [("grid.channel-not-shown", "note")], ["base-grid-probe", "head-grid-probe"]),
    ("", None, "no-channel-declared", [("grid.no-channel", "note")], []),
], ids=["a target that ignores the grid", "no channel"])
def test_a_grid_nothing_shows_reaching_the_target_runs_no_cells_and_never_passes(tmp_path, channel, probe_exit,
                                                                                 base_state, rules, launched):
    plan = Plan(channel=channel, reason="" if channel else "no channel flag was given", rows=[["4", "16"]])
    earlier = {**ready(), "grid_channel": StageResult(name="grid_channel", facts=Facts(grid_plan=plan))}
    runs = {label: target_run(tmp_path, label, exit=probe_exit) for label in ("base-grid-probe", "head-grid-probe")}
    ctx, launcher = after_both_sides(tmp_path, runs, earlier=earlier, shape_env="SHAPES", grid="4,16", shape_vars="M,N")
    judged = grid.head(ctx)
    assert ctx.earlier["baseline_control"].stage.s1_grid["state"] == base_state
    assert judged.stage.status == "skip" and [(finding.rule, finding.severity) for finding in judged.findings] == rules
    assert [label for label in launcher.labels if "grid" in label] == launched


@pytest.mark.parametrize("axis_exit, axis_log, argv, rules", [
    (2, f"error: argument --mode: invalid choice: '{AXIS_SENTINEL}'", ("--shapes", "4,16", "--mode", "slow"), []),
    (0, "done", ("--shapes", "4,16"), [("grid.axes-not-run", "note")]),
], ids=["refused", "accepted"])
def test_an_axis_rides_the_grid_run_only_once_it_refused_an_invalid_value(tmp_path, axis_exit, axis_log, argv, rules):
    plan = Plan(channel="cli", rows=[["4", "16"]], axis_state="declared",
                axes=[Axis(name="mode", flag="--mode", values=["slow"])])
    earlier = {**ready(), "grid_channel": StageResult(name="grid_channel", facts=Facts(grid_plan=plan))}
    named = f"error: argument --shapes: invalid {SENTINEL}"
    runs = {"base-grid": passing(tmp_path, "base-grid"), "head-grid": passing(tmp_path, "head-grid"),
            **{label: target_run(tmp_path, label, exit=2, log=named) for label in ("base-grid-probe", "head-grid-probe")},
            "head-axisprobe-mode": target_run(tmp_path, "head-axisprobe-mode", exit=axis_exit, log=axis_log)}
    ctx, launcher = after_both_sides(tmp_path, runs, earlier=earlier, shape_arg="--shapes", grid="4,16", shape_vars="M,N")
    judged = grid.head(ctx)
    assert launcher.launched("head-grid")[1].argv == argv and judged.stage.axis_argv == list(argv[2:])
    assert [(finding.rule, finding.severity) for finding in judged.findings] == rules
    if rules:  # the test selection says the axis was dropped, and why
        assert "accepted __VALIDATOR_INVALID_AXIS__" in judged.findings[0].detail
        assert judged.selection.axis_state == "hook-not-consumed" and "--mode" in judged.selection.axis_state_reason
        assert judged.selection.axes[0].hook_proof == "accepted-invalid-value"


def test_a_grid_that_passes_on_the_target_s_own_defaults_alone_earns_no_pass(tmp_path):
    plan = Plan(channel="env", rows=[["4", "16"]])
    earlier = {**ready(), "grid_channel": StageResult(name="grid_channel", facts=Facts(grid_plan=plan), selection=Selection(
        grid_independence="duplicates-target-defaults", grid_independence_reason="every cell is one of its defaults"))}
    named = f"ValueError: {SENTINEL}"
    runs = {"base-grid": passing(tmp_path, "base-grid"), "head-grid": passing(tmp_path, "head-grid"),
            **{label: target_run(tmp_path, label, exit=1, log=named) for label in ("base-grid-probe", "head-grid-probe")}}
    ctx, _ = after_both_sides(tmp_path, runs, earlier=earlier, shape_env="SHAPES", grid="4,16", shape_vars="M,N")
    judged = grid.head(ctx)
    assert judged.stage.status == "skip" and "every cell is one of the target's own defaults" in judged.stage.note


@pytest.mark.parametrize("options, seen, said", [
    ({"shape_vars": ""}, {"route": "kernels.scale:scale_rows", "kernel_symbols": ["kernels.scale:scale_rows"],
                          "route_calls": {"kernels.scale:scale_rows": 2}},
     "the route ran but no executed shape was captured: no --shape-vars were named"),
    ({"expected_route": "kernels.scale:missing", "shape_vars": "M,N"},
     {"route": "kernels.scale:missing", "unresolved_routes": ["kernels.scale:missing"]},
     "expected route kernels.scale:missing, observed nothing; unresolvable in the target: kernels.scale:missing"),
    ({"expected_route": ""}, None, "--expected-route was not supplied, so no route was watched"),
], ids=["no shape vars", "a route the target does not have", "no route"])
def test_a_receipt_without_the_route_and_its_shapes_earns_no_pass(tmp_path, options, seen, said):
    head = target_run(tmp_path, "head-repo", receipt=receipt(**seen) if seen is not None else None)
    ctx, _ = after_both_sides(tmp_path, {"head-repo": head}, **options)
    read = receipt_stage.run(ctx)
    assert read.stage.status == "skip" and read.stage.note == said


XFAILED = TESTS.replace("def test_scale(", "@pytest.mark.xfail(strict=False)\ndef test_scale(")
RENAMED = "tests/test_renamed.py"


@pytest.mark.parametrize("hiding, renamed", [({TARGET: XFAILED}, False), ({TARGET: None}, False),
                                             ({TARGET: None, RENAMED: TESTS.replace("N)", "N)  # loosened")}, True)],
                         ids=["xfail", "deletion", "renaming"])
def test_a_target_the_pr_xfails_deletes_or_renames_is_judged_by_base_s_file_with_the_grid(tmp_path, hiding, renamed):
    plan = Plan(channel="env", rows=[["4", "16"], ["3", "13"]])
    earlier = {**ready(), "grid_channel": StageResult(name="grid_channel", facts=Facts(grid_plan=plan))}
    runs = {"base-grid": passing(tmp_path, "base-grid"), "base-baseoracle": passing(tmp_path, "base-baseoracle"),
            "base-baseoracle-grid": passing(tmp_path, "base-baseoracle-grid"),
            "base-grid-probe": target_run(tmp_path, "base-grid-probe", exit=1, log=f"ValueError: {SENTINEL}"),
            "head-baseoracle": failing(tmp_path, "head-baseoracle"),
            "head-baseoracle-grid": failing(tmp_path, "head-baseoracle-grid")}
    ctx, launcher = after_both_sides(tmp_path, runs, head={**HEAD, **hiding}, earlier=earlier, shape_env="SHAPES",
                                     grid="4,16;3,13", shape_vars="M,N", target=RENAMED if renamed else TARGET)
    judged = base_oracle.run(ctx)
    assert judged.stage.status == "fail" and [finding.rule for finding in judged.findings] == ["oracle.regression"]
    oracle_runs = [(side, asked.label, asked.target, asked.env) for side, asked in launcher.asked
                   if "baseoracle" in asked.label]
    cells = (("SHAPES", "4,16;3,13"),)
    if renamed:  # base's file at base's path, run on base too, so each of its tests has a base outcome
        assert oracle_runs == [("base", "base-baseoracle", TARGET, ()), ("base", "base-baseoracle-grid", TARGET, cells),
                               ("head", "head-baseoracle", TARGET, ()), ("head", "head-baseoracle-grid", TARGET, cells)]
    else:  # head's code under base's file, held at base in head's tree
        assert oracle_runs == [("head", "head-baseoracle", None, ()), ("head", "head-baseoracle-grid", None, cells)]
        assert TARGET in launcher.kept_at_base["head-baseoracle"]


@pytest.mark.parametrize("probe_exit, log, proof, state", [
    (2, f"error: argument --block: invalid int value: '{AXIS_SENTINEL}'", "refused-invalid-value", "proven"),
    (0, "done", "accepted-invalid-value", "hook-not-consumed"),
    (1, "Traceback: ImportError", "accepted-invalid-value", "hook-not-consumed"),
])
def test_an_axis_is_proven_only_by_refusing_an_invalid_value_by_name(tmp_path, probe_exit, log, proof, state):
    plan = Plan(channel="cli", rows=[["4", "16"]], axes=[Axis(name="block", flag="--block", values=["64", "128"])])
    launcher = RecordingLauncher({"head-axisprobe-block": target_run(tmp_path, "head-axisprobe-block", exit=probe_exit,
                                                                     log=log, runner="script")})
    ctx = stage_context(BASE, HEAD, target="bench/run.py", earlier=ready(), launcher=launcher)
    found, _, runs = axis_probes(ctx, plan)
    assert (plan.axes[0].hook_proof, found) == (proof, state)
    assert launcher.launched("head-axisprobe-block")[1].argv == ("--block", AXIS_SENTINEL)
    assert launcher.launched("head-axisprobe-block")[1].runner == "script" and len(runs) == 1


def test_a_replay_with_nothing_captured_launches_nothing_and_requires_nothing(tmp_path):
    ctx, launcher = after_both_sides(tmp_path, {})
    replayed = replay.run(ctx)
    assert replayed.stage.status == "skip" and replayed.stage.required is False
    assert [asked.label for _, asked in launcher.asked] == ["base-repo", "head-repo"]


BENCH_FILE = "bench/bench_op.py"
BENCH_BASE = {**BASE, BENCH_FILE: "from kernels.scale import scale_rows\nprint('| M | time (us) |')\n"}


def timing(folder: Path, label: str, cost: float, rows: int = 6, exit: int = 0) -> object:
    """A timing run's log as a bench prints it: one row per size, its time scaled by `cost`."""
    table = "\n".join(f"| {m} | {10.0 * (m + 1) * cost:.3f} | {10.0 * (m + 1):.3f} |" for m in range(rows))
    return target_run(folder, label, exit=exit, runner="script",
                      log=f"| M | time (us) | ref (us) |\n|---|---|---|\n{table}\n")


@pytest.mark.parametrize("head_cost, rows, failed_round, status, said", [
    (1.25, 6, None, "fail", ""),
    (1.0, 6, None, "pass", ""),
    (1.25, 2, None, "skip", "2 matched rows; PERF_MIN_ROWS is 3"),
    (1.0, 6, "head-perf-2", "skip", "a failed repeat poisons its side"),
])
def test_perf_times_both_sides_in_interleaved_rounds_and_judges_the_rows(tmp_path, monkeypatch, head_cost, rows,
                                                                          failed_round, status, said):
    monkeypatch.setenv("PERF_REPEAT", "3")
    runs = {f"{side}-perf-{number}": timing(tmp_path, f"{side}-perf-{number}", head_cost if side == "head" else 1.0,
                                            rows, exit=1 if f"{side}-perf-{number}" == failed_round else 0)
            for number in (1, 2, 3) for side in ("base", "head")}
    ctx, launcher = after_both_sides(tmp_path, runs, base=BENCH_BASE, perf_args=BENCH_FILE)
    timed = perf.run(ctx)
    assert [(side, asked.label) for side, asked in launcher.asked[2:]] == \
        [(side, f"{side}-perf-{number}") for number in (1, 2, 3) for side in ("base", "head")]
    assert timed.stage.status == status and said in timed.stage.note
    if status == "fail":
        assert [(finding.rule, finding.severity) for finding in timed.findings] == [("perf.slower", "should-fix")]
        assert timed.stage.median_ratio == pytest.approx(0.8, abs=0.01)
