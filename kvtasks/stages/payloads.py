"""The stage objects other stages read (by type: `ctx.get(GpuClaim)`), apart from their stages'
logic, so a reader imports what it reads and never the stage that made it. A stage nobody else
reads keeps its payload in its own module.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict

from kvtasks.harness.junit import ExecutionStats
from kvtasks.report.model import Stage


class GpuClaim(Stage):
    """The claimed device and what its idleness rests on (gpu_requirement and gpu_activity amend it)."""

    model_config = ConfigDict(extra="forbid")

    host: str | None = None
    vendor: str | None = None
    hip_index: int | None = None  # AMD: the device index targets see
    amd_smi_index: Any = None
    cuda_index: int | None = None  # NVIDIA
    nvml_index: Any = None
    bdf: str | None = None
    model: str | None = None
    arch: str | None = None
    gfx_activity_before_pct: int | None = None
    idleness_basis: str | None = None
    lock: str | None = None
    picker: str | None = None
    smi_source: str | None = None
    picker_exit: int | None = None  # the picker's exit when it chose nothing
    requirement_note: str | None = None  # gpu_requirement: the target ran without a GPU
    head_run_artifacts: list[str] | None = None  # gpu_requirement: what its head run left (for the stage adopting it)
    post_run_note: str | None = None  # gpu_activity: why activity after the runs is not recorded
    gfx_activity_after_pct: int | None = None  # gpu_activity


class RuntimeCompat(Stage):
    """Which runtime the target imports, from where, and why it is or is not the checkout's."""

    model_config = ConfigDict(extra="forbid")

    reason: str | None = None  # runtime_mismatch when the runtime was not established
    profile: str | None = None
    module: str | None = None
    expected_root: Any = None
    import_roots: Any = None
    cpu_tier_hooks: str | None = None
    base_import: str | None = None  # whether base imports the module, asked only when head's import fails
    traceback_tail: str | None = None
    runtime_sources_changed: list[str] | None = None


class BaselineControl(Stage):
    """The target and the grid on the clean base tree, as later stages attribute against."""

    model_config = ConfigDict(extra="forbid")

    repo_tests: dict[str, Any] | None = None  # state, exit, log, stats ... of the base run of the target
    s1_grid: dict[str, Any] | None = None  # the same for the grid's base cells
    artifacts: list[str] | None = None  # what the base run left in the tree (removed)
    reuse: str | None = None  # why this baseline must not stand for its key again
    evidence_tier: str | None = None  # set by the report when the Triton CPU tier ran


class RepoTests(Stage):
    """The head run of the repository's own target."""

    model_config = ConfigDict(extra="forbid")

    exit: int | None = None
    log: str | None = None
    log_bytes: int | None = None
    stats: ExecutionStats | None = None  # what JUnit or the liveness check counted
    timed_out: bool | None = None
    died: str | None = None  # how the run died after reaching the route, and in which test
    pytest_addopts_dropped: dict[str, Any] | None = None
    route_outputs: list[dict[str, Any]] | None = None  # the NaN/Inf watch
    cpu_tier: dict[str, Any] | None = None  # what the Triton CPU tier saw in the run
    artifacts: list[str] | None = None  # what the head run left in the tree (removed)
    evidence_tier: str | None = None  # set by the report when the Triton CPU tier ran


class CorrectnessGrid(Stage):
    """correctness_grid's fields: the channel's runtime proof, the grid run, and each cell's outcome."""

    model_config = ConfigDict(extra="forbid")

    grid: str | None = None  # the caller's --grid as given ("" when the cells were generated)
    channel: Literal["env", "cli", "pytest"] | None = None
    cells: list[str] | dict[str, Literal["executed", "skipped", "absent"]] | None = None  # per-cell outcomes once run
    cells_basis: str | None = None  # how the cells were told apart, or why they could not be
    cells_skipped: list[str] | None = None  # cells that did not run on head
    interpreter_skipped_cells: dict[str, str] | None = None  # cell -> why the CPU tier set it aside
    died: str | None = None  # how the grid run died after reaching the route, and in which test
    hook_probe_exit: int | None = None
    hook_probe_log: str | None = None
    hook_proof: str | None = None  # what the poisoned run showed of the channel
    exit: int | None = None
    log: str | None = None
    log_bytes: int | None = None  # what the grid run printed; a script's run credits an arch only with output
    stats: ExecutionStats | None = None
    axis_argv: list[str] | None = None  # the proven axes' flags and values, on the grid run's argv
    cpu_tier: dict[str, Any] | None = None  # what the CPU tier saw in the grid run
    route_outputs: list[dict[str, Any]] | None = None  # the route's outputs, for the NaN/Inf watch
    evidence_tier: str | None = None  # set by the report when the Triton CPU tier ran


class TestPolicy(Stage):
    """What the PR did to its own tests: tolerances, commented-out rows, other weakenings."""

    model_config = ConfigDict(extra="forbid")

    files: list[str] | None = None  # the target and the test files the PR changes
    kernel_files_changed: bool | None = None
    reference_tolerances: dict[str, Any] | None = None  # --tol-table
    tolerances_base: dict[str, Any] | None = None  # path::where -> value
    tolerances_head: dict[str, Any] | None = None
    tolerances_base_by_name: list[str] | None = None  # tolerances given by a name (atol=ATOL)
    tolerances_head_by_name: list[str] | None = None
    loosened: list[dict[str, Any]] | None = None  # where, base, head
    exceeds_reference: list[Any] | None = None
    not_literal: list[str] | None = None  # replacements that cannot be compared
    commented_out_shape_rows_base: int | None = None
    commented_out_shape_rows: int | None = None
    commented_out_shape_rows_added: int | None = None
    newly_commented_rows: list[str] | None = None
    weakened: list[str] | None = None  # skips, marks, swallowed assertions, outcome-rewriting hooks ...
    added_with_unknown_default: list[str] | None = None
    weakened_files: list[str] | None = None
    target_deleted: str | None = None
    startup_files: list[str] | None = None  # interpreter start-up code the PR adds or changes
    stdlib_shadows: list[str] | None = None  # modules at an import root named like the standard library's
    compiled_modules: list[str] | None = None  # extension modules and sourceless bytecode the PR adds or changes
    route_side: list[str] | None = None  # the changed files that are the code under test (kvtasks.stages.sides)
    test_side: list[str] | None = None  # the changed files that judge it
    sides_basis: str | None = None
    target_renamed_from: str | None = None  # the deleted test file a PR-added target replaces
    tampering: list[str] | None = None  # code outside the tests reaching into what judges it
    config_changes: list[str] | None = None  # pytest configuration that loads plugins or drops tests
    # the changed test-side files the base oracle holds at base: when any, PASS needs it to pass
    oracle_required: list[str] | None = None
    # a target the PR adds whose comparisons take every side from code the PR supplies: PASS is out of reach
    reference_from_pr: list[str] | None = None
