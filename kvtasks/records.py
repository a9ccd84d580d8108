"""What stages hand each other and the report shows, typed: `Facts` (what a run learned about the
PR, the host and the runtime) and `Selection` (what the report shows as test_selection). A stage
writes only the fields its StageSpec declares (`provides` for a record type, `sets` for the others;
checked as it runs); the comments say who reads them. Records hold data only: they never launch,
read evidence or judge.

A result stores only the fields its stage set; `merged` lays results over each other in the order
they ran, a later set field replacing an earlier one, which is how `Context.facts`,
`Context.selection` and the report read them.
"""
from __future__ import annotations

from typing import Any, Iterable, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

Independence = Literal["adds-coverage", "duplicates-target-defaults", "unknown"]

# the fields, at any depth of a stage result, whose value is the path of a file or folder a run left:
# its log, JUnit XML, receipt, captured route calls, the log of an attempt pytest refused. They are
# written where the run worked (its scratch folder) and moved into the store with the result
# (kvtasks.evidence.store); nothing else a result holds is an artifact's path (a run's command and
# the scratch folder it saw stay as they were)
ARTIFACT_FIELDS = frozenset({"log", "junit_xml", "receipt", "receipt_path", "captures", "first_log", "hook_probe_log",
                             "base_log", "head_log"})


# the docstring is the published report schema's description (tests/report_schemas/3.json), kept as
# published: its kvtasks.containment is the module kvtasks.system.containment now
class Survivor(BaseModel):
    """A process of a launch that was alive once the launch's leader had exited (kvtasks.containment)."""

    pid: int
    command: str
    found_as: str  # "process group", "orphan" (reparented to the launcher), "descendant", "cgroup"
    ended: str  # how it was ended: "SIGKILL", or why it could not be


class Record(BaseModel):
    """A hand-off record: declared fields only, and only the ones a stage set are stored; a value
    set later is checked against its field as one given at construction is."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    @model_serializer(mode="wrap")
    def _only_what_was_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        return {key: value for key, value in data.items() if key in self.model_fields_set}

    def set(self, **fields: Any) -> None:
        for name, value in fields.items():
            setattr(self, name, value)


R = TypeVar("R", bound=Record)


def merged(kind: type[R], records: Iterable[R]) -> R:
    """The records laid over each other in order: a later set field replaces an earlier one."""
    fields: dict[str, Any] = {}
    for record in records:
        fields.update({name: getattr(record, name) for name in record.model_fields_set})
    return kind.model_construct(_fields_set=set(fields), **fields)


# -- records a stage hands the next -----------------------------------------------------------------

class Axis(BaseModel):
    """One --axis NAME=--flag:v1;v2: a script flag the grid run adds, under the grid's burden of proof."""

    name: str
    flag: str
    values: list[str]
    hook_proof: Literal["not-evaluated", "flag-declared-in-add_argument", "flag-not-declared",
                        "refused-invalid-value", "accepted-invalid-value"] = "not-evaluated"
    target_default: list[str] | None = None  # the flag's literal default rows (None when computed)
    independence: Independence = "unknown"


class Plan(BaseModel):
    """What the grid's channel step hands the grid's runs: the chosen channel (or why none), the
    cells, the target's own defaults, the axes."""

    channel: Literal["", "env", "cli", "pytest"] = ""
    reason: str = ""  # why no channel was chosen: every channel tried, and why it was refused
    rows: list[list[str]] = []
    defaults: list[str] | None = None  # the target's own literal cells (None when computed)
    axes: list[Axis] = []
    axis_state: Literal["none", "malformed-spec", "unusable", "hook-not-found", "declared"] = "none"
    interpreter_skipped: list[str] = []  # cells set aside under the CPU tier (bf16)
    # one parametrize mark binds exactly the grid's argnames: each side runs its repository tests, the
    # grid and the poisoned cell in one pytest session (stacked marks' cells are a product no row joins)
    merged_session: bool = False
    # the mark binds names beside the grid's (a dtype): each keeps its first literal row's cell in every
    # grid row, so the grid's rows fill the whole mark (argname -> cell)
    fill: dict[str, str] = {}


class Repo(BaseModel):
    """What base, patch and head are (merge_sim), as the report shows them. A crash before merge_sim
    says what it knows without validation (base unknown), and no report is composed from that."""

    worktree: str
    base: str = Field(pattern=r"^[0-9a-f]{40}$")
    head: str | None = Field(default=None, pattern=r"^[0-9a-f]{40}$")
    kind: Literal["aiter", "flydsl", "unknown"]
    patch_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    # a PR given by refs: the repository or URL the caller named (`worktree` is then kvtasks' private
    # checkout of the base ref's tip), and the two refs as given; `base` and `head` are their OIDs
    source: str | None = None
    base_ref: str | None = None
    head_ref: str | None = None


# how kvtasks.harness.environment builds a target's environment
ENVIRONMENT_POLICY = "allowlist by name prefix, then a credential denylist; private HOME and caches per phase"


class TargetEnvironment(BaseModel):
    """What a target's environment was built from (kvtasks.harness.environment)."""

    policy: str = ENVIRONMENT_POLICY
    passed_through: list[str]
    given: list[str] = []  # names --env set, on both sides
    note: str = "credential-like names are never passed, even when a prefix allows them"


class RuntimeFingerprint(BaseModel):
    """What the cache keys need about the interpreter, whether or not the runtime matched."""

    python_executable: str | None = None
    python_version: str | None = None
    distributions: list[str] | None = None  # "name==version", as the probe lists them
    module_path: str | None = None
    editable_sources: dict[str, str] | None = None  # distribution -> source identity

    def versions(self) -> dict[str, str]:
        """name (lower case) -> version of the installed distributions."""
        found = {}
        for entry in self.distributions or []:
            name, _, version = entry.partition("==")
            found[name.lower()] = version
        return found


class RuntimeIdentity(Record):
    """The runtime the target imports, as runtime_compat established it."""

    module: str | None = None
    module_path: str | None = None
    module_version: Any = None
    expected_root: Any = None
    python_executable: str | None = None
    python_version: str | None = None
    source_sha: str | None = None
    native_artifacts: list[Any] | None = None
    native_artifacts_basis: str | None = None
    roots: list[str] | None = None
    import_roots: Any = None


class CpuTier(Record):
    """The Triton CPU tier as this run set it up (cpu_tier); every field is set when the tier is on."""

    interpreter: str | None = None
    evidence: str | None = None
    reason: str | None = None
    triton: str | None = None
    torch: str | None = None
    numpy: str | None = None
    sanitizer: str | None = None
    device_redirect: str | None = None
    autotune: str | None = None
    sparse_grid_programs: Any = None
    device_capability: Any = None
    device_name: str | None = None
    assumptions: list[str] | None = None


# -- the two records a result carries ---------------------------------------------------------------

class Facts(Record):
    """What a run learned, beside the stage objects."""

    # run_facts -> report (started_utc, isolation), keys (gpu_driver, target_environment_values)
    started_utc: str | None = None
    isolation: dict[str, Any] | None = None
    gpu_driver: dict[str, str] | None = None
    target_environment_values: dict[str, str] | None = None
    recovered_run: dict[str, Any] | None = None  # phases -> report: what a killed earlier run left
    halt: str | None = None  # merge_sim or a crash -> phases, report: the PR's groups stop here
    repo: Repo | None = None  # merge_sim -> keys, report
    degraded_mode: Literal["NO_GPU"] | None = None  # gpu_claim -> report
    visible_devices: dict[str, str] | None = None  # gpu_claim -> every launch on the claimed device
    runtime_fingerprint: RuntimeFingerprint | None = None  # runtime_compat -> keys, cpu_tier
    runtime_identity: RuntimeIdentity | None = None  # runtime_compat -> report, PASS gate
    # runtime_compat's probe -> the correctness gate: where the target's interpreter finds pytest ("": nowhere)
    pytest_module: str | None = None
    cpu_tier: CpuTier | None = None  # cpu_tier -> keys, report, every launch (None: the tier is off)
    grid_plan: Plan | None = None  # the grid's channel step -> the grid's runs


class InferredTarget(BaseModel):
    """A target the impact map inferred from the PR's changed files (kvtasks.sources.impact_map), and
    why: what a maintainer copies into [tool.kvtasks]."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    target: str
    route: str
    shape_vars: list[str]
    shape_argnames: list[str]
    changed: list[str]  # the changed files that lead to the route
    tests: list[str]  # the target's items that called the route on base
    why: str
    map_base_oid: str = ""  # the base whose map it was read from
    map_reused: bool = False  # the map was stored by an earlier PR on this base (no base test run)

    def options(self) -> dict[str, str]:
        """As the options a configured target would give."""
        options = {"target": self.target, "expected_route": self.route, "shape_vars": ",".join(self.shape_vars)}
        if self.shape_argnames:
            options["shape_argnames"] = ",".join(self.shape_argnames)
        return options


class Selection(Record):
    """What the report shows as test_selection, and what later stages read of it."""

    # selection -> every launch (runner), keys, report
    target: str | None = None
    shape_env: str | None = None
    shape_arg: str | None = None
    shape_argnames: str | None = None
    grid: str | None = None
    expected_route: str | None = None
    shape_vars: str | None = None
    axes_requested: list[str] | None = None
    test_provenance: str | None = None
    test_provenance_reason: str | None = None
    runner: Literal["pytest", "script", "none"] | None = None
    runner_reason: str | None = None
    runner_basis: str | None = None
    runner_selected_by_structure: str | None = None
    runner_structure_reason: str | None = None
    runner_risk: str | None = None
    unvalidated_changes: list[str] | None = None  # changed files no target of base's map validates
    inferred: InferredTarget | None = None  # how the impact map chose this target, with no configuration
    # the grid's channel step -> keys, receipt, report; the grid stage updates independence and axes
    grid_channel: Literal["", "env", "cli", "pytest"] | None = None
    grid_channel_basis: str | None = None
    grid_channel_reason: str | None = None
    grid_cells: list[str] | None = None
    grid_cells_basis: str | None = None
    grid_independence: Independence | None = None
    grid_independence_reason: str | None = None
    axes: list[Axis] | None = None
    axis_state: Literal["none", "malformed-spec", "unusable", "hook-not-found", "declared", "hook-not-consumed",
                        "proven"] | None = None
    axis_state_reason: str | None = None
    # cpu_tier -> report
    cpu_tier: Literal["triton", "off"] | None = None
    cpu_tier_reason: str | None = None
    # test_policy -> base_oracle, report: what base's run loaded and how the PR's files split by it
    loaded_files: list[dict[str, str]] | None = None
    route_side: list[str] | None = None
    test_side: list[str] | None = None
    sides_basis: str | None = None
    # gpu_requirement -> the correctness gate, report
    gpu_requirement: Literal["required", "not-required"] | None = None
    gpu_requirement_basis: str | None = None
