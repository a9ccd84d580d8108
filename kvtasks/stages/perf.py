"""perf: base against head on the claimed GPU, interleaved, with statistics that beat the noise.

On by default; a skip means "not measured", never "no regression". The timed entry point is
--perf-args (a .py file first, or arguments for the target), else a harness the target exposes
(--scenario bench, perftest/@benchmark, triton.testing), else the one bench that imports a changed
module. Rounds alternate base, head, base, head ... (PERF_REPEAT per side) in one lend of the
tree, so drift cancels; whatever a bench writes into the tree is removed between runs.

Statistics (numpy), chosen to be honest at PERF_REPEAT=3, where a bootstrap over three rounds has
only ten distinct resamples: per matched row and column the oriented ratio (> 1: head is better)
of each side's best round (best of n: noise only ever adds time), shown with the range of the
ratio over every pairing of a base round with a head round; a noise floor from the spread between
base rounds (second best against best: an A/A test); a column's ratio is the median over its rows,
with exact distribution-free bounds on that median (order statistics of the row ratios: each end a
one-sided bound at 95% or more from five rows on; fewer rows state the lower confidence they
have); the headline is the worst eligible column. A regression is claimed only when the headline
is below PERF_THRESHOLD and the column's upper bound is below 1 by more than the noise floor.
"""
from __future__ import annotations

import ast
import math
import re
import shlex
from dataclasses import dataclass, field
from pathlib import PurePosixPath

import numpy as np

from kvtasks import harness
from kvtasks.stages import Context, StageResult, correctness, cpu_tier, gpu_claim, result
from kvtasks.worktree import GitFailed

NAME = "perf"
CONFIDENCE = 0.95
METHOD = ("per row: best of n rounds per side, with the range over every base/head round pairing and the base "
          "rounds' spread (the A/A noise floor); per column: the median over rows, with exact distribution-free "
          "bounds on it (order statistics; each end's one-sided confidence is stated)")
_LATENCY = re.compile(r"(?<![a-z])(us|usecs?|microseconds?|ms|msecs?|milliseconds?|ns|nsecs?|seconds?|secs?|"
                      r"latency|time|elapsed|duration|µs|μs)(?![a-z])")
_THROUGHPUT = re.compile(r"(?<![a-z])(tflops?|gflops?|mflops?|flops|tb/s|gb/s|mb/s|bw|bandwidth|throughput|"
                         r"tokens/s|samples/s|ops/s)(?![a-z])")
_PERF_METRIC = re.compile(r"([\w.\-]+)\s+avg:\s*([0-9.eE+-]+)\s*(us|ms|ns|µs|μs)(?![a-z])")
# a header naming an error, a ratio or a unit heads a measured column: never part of a row's identity
_MEASURED = re.compile(r"(?<![a-z])(errs?|errors?|rel|relative|abs|diffs?|delta|mismatch(es)?|[rm]?mse|mae|ratio|"
                       r"speed-?ups?|vs|util|utili[sz]ation|pct|percent|bytes|[kmgt]i?b|watts?|[mg]hz)(?![a-z])"
                       r"|%|\(x\)|\[x\]")
_NUMBER_WITH_UNIT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*(%|x|[a-zµμ]+/s|us|ms|ns|s|µs|μs|"
                               r"[kmgt]i?b|flops?|[kmgt]flops?)", re.IGNORECASE)
_HARNESSES = (("--scenario", "bench", "--scenario bench", "the target exposes --scenario bench"),
              ("perftest", None, "", "perftest harness"), ("@benchmark", None, "", "@benchmark harness"),
              ("triton.testing.perf_report", None, "", "triton.testing.perf_report harness"),
              ("triton.testing.do_bench", None, "", "triton.testing.do_bench harness"))


def column_kind(header: str) -> str:
    """latency, throughput, measured (an error, a ratio, a unit: compared by nothing) or key."""
    lowered = header.lower().strip()
    if _LATENCY.search(lowered):
        return "latency"
    if _THROUGHPUT.search(lowered):
        return "throughput"
    if _MEASURED.search(lowered):
        return "measured"
    return "key"


def _measured_cell(cell: str) -> bool:
    """A value someone measured: a fraction, scientific notation, nan/inf, or a number with a unit.
    Integers (shapes, counts, 256.0 from a pandas frame), dtype names and short words are not."""
    text = cell.replace(",", "").strip()
    if _NUMBER_WITH_UNIT.fullmatch(text):
        return True
    try:
        value = float(text)
    except ValueError:
        return False
    return not math.isfinite(value) or "e" in text.lower() or value != int(value)


def _number(cell: str) -> float | None:
    text = cell.replace(",", "").replace("%", "").strip()
    text = re.sub(r"[a-zµμ/]+$", "", text, flags=re.IGNORECASE).strip()
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value > 0 and np.isfinite(value) else None


# -- scraping: {(table signature, row key): {column: (kind, value)}} ------------------------------

def _row_keys(rows: list[list[str]], kinds: list[str]) -> list[str]:
    return [" / ".join(c.strip() for c, k in zip(cells, kinds) if k == "key") or f"#{position}"
            for position, cells in enumerate(rows)]


def _kinds(headers: list[str], rows: list[list[str]]) -> list[str]:
    """Each column's kind. A key column holding measured values (a rel-err column under a header
    that does not say so) is measured too: base and head differ there by construction. Only when
    the rows could no longer be told apart without those columns (a dropout p of 0.0 and 0.1) are
    they settings after all, and stay in the key."""
    kinds = [column_kind(h) for h in headers]
    demoted = [("measured" if kind == "key" and any(_measured_cell(cells[index]) for cells in rows) else kind)
               for index, kind in enumerate(kinds)]
    if len(set(_row_keys(rows, demoted))) < len(set(_row_keys(rows, kinds))):
        return kinds
    return demoted


def _table(headers: list[str], rows: list[list[str]], tables: dict) -> None:
    kinds = _kinds(headers, rows)
    if not any(kind in ("latency", "throughput") for kind in kinds):
        return
    signature = "|".join(h.strip().lower() for h, k in zip(headers, kinds) if k == "key")
    for key, cells in zip(_row_keys(rows, kinds), rows):
        values = {h.strip(): (k, _number(c)) for h, k, c in zip(headers, kinds, cells)
                  if k in ("latency", "throughput")}
        tables[(signature, key)] = {h: kv for h, kv in values.items() if kv[1] is not None}


def _perf_line(line: str, tables: dict) -> bool:
    """aiter's perftest convention: `[perf] <row key> NAME avg: V unit, NAME avg: V unit`, one line per row.
    The key is everything before the first metric, wherever its name also occurs inside the key
    (`torch` in `torch.bfloat16`); every line of a run joins the one table "[perf]"."""
    text = line.split("[perf]", 1)[1]
    metrics = list(_PERF_METRIC.finditer(text))
    if not metrics:
        return False
    key = re.sub(r"\s+", " ", text[:metrics[0].start()]).strip(" ,;")
    tables[("[perf]", key)] = {f"{m.group(1)} {m.group(3)}": ("latency", float(m.group(2))) for m in metrics
                               if _number(m.group(2)) is not None}
    return True


def scrape(text: str) -> dict:
    """Every timing row a log holds: markdown tables, [perf] lines, CSV tables, triton reports."""
    tables: dict = {}
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index].strip()
        following = lines[index + 1].strip() if index + 1 < len(lines) else ""
        if "[perf]" in line and _perf_line(line, tables):
            index += 1
            continue
        if line.count("|") >= 2 and re.fullmatch(r"[|:\-\s]+", following or "x") and "-" in following:
            headers = [h for h in line.strip("|").split("|")]
            rows, index = [], index + 2
            while index < len(lines) and lines[index].count("|") >= 2:
                cells = lines[index].strip().strip("|").split("|")
                if len(cells) == len(headers):
                    rows.append(cells)
                index += 1
            _table(headers, rows, tables)
            continue
        if "," in line and following.count(",") == line.count(",") and line.count(",") >= 1 \
                and not any(_number(c) for c in line.split(",")):
            headers = line.split(",")
            rows, index = [], index + 1
            while index < len(lines) and lines[index].strip().count(",") == len(headers) - 1 \
                    and "[perf]" not in lines[index]:
                rows.append(lines[index].strip().split(","))
                index += 1
            _table(headers, rows, tables)
            continue
        if line.endswith(":") and following and not following.startswith(("|", "[")):
            # triton.testing.perf_report prints a pandas frame: names may hold single spaces
            headers = re.split(r"\s{2,}", following)
            rows, index = [], index + 2
            while index < len(lines) and (cells := lines[index].split()) and cells[0].isdigit() \
                    and len(cells) == len(headers) + 1:
                rows.append(cells[1:])
                index += 1
            if rows:
                _table(headers, rows, tables)
                continue
            index -= 1
        index += 1
    return tables


# -- statistics --------------------------------------------------------------------------------------

@dataclass
class Comparison:
    status: str  # ok | regression | insufficient
    reason: str
    rows: list[dict] = field(default_factory=list)
    columns: dict = field(default_factory=dict)
    worst_column: str | None = None
    headline: float | None = None
    interval: tuple[float, float] | None = None
    noise_floor: float | None = None
    matched_rows: int = 0


def _best(values: np.ndarray, kind: str, axis=-1) -> np.ndarray:
    """Contention, clock ramps and neighbours only ever add time: the best round is the kernel."""
    return values.min(axis=axis) if kind == "latency" else values.max(axis=axis)


def _oriented(base, head, kind: str):
    return base / head if kind == "latency" else head / base


def _spread(base: np.ndarray, kind: str) -> float:
    """How far base rounds disagree: the second-best base round against the best (an A/A test)."""
    if len(base) < 2:
        return 0.0
    ordered = np.sort(base) if kind == "latency" else np.sort(base)[::-1]
    return float(abs(ordered[1] / ordered[0] - 1))


def median_interval(values, confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """Exact bounds on the median over rows: (low, high, the confidence of each bound).

    Of n values, the k-th smallest lies below the median of the population they come from with
    probability 1 - P(Binomial(n, 1/2) < k), whatever its distribution; the k-th largest lies above
    it with the same probability. k is the largest whose confidence still reaches `confidence`;
    with fewer than five rows even (min, max) falls short, and the confidence says how far.
    Each bound is one-sided because each decision is: a regression needs the upper bound below 1.
    """
    ordered = sorted(float(value) for value in values)
    count = len(ordered)

    def bound_confidence(k: int) -> float:
        return 1 - sum(math.comb(count, below) for below in range(k)) / 2 ** count

    k = 1
    while k < (count + 1) // 2 and bound_confidence(k + 1) >= confidence:
        k += 1
    return ordered[k - 1], ordered[count - k], bound_confidence(k)


def compare(base_logs: list[dict], head_logs: list[dict], threshold: float, min_rows: int) -> Comparison:
    """Match rows across sides and judge the worst eligible column (see the module docstring)."""
    base_cells, head_cells = _samples(base_logs), _samples(head_logs)
    if not base_cells or not head_cells:
        return Comparison("insufficient", "a side printed no parseable timing table")
    shared = sorted(set(base_cells) & set(head_cells))
    if not shared:
        return Comparison("insufficient", "the two sides measured different rows")
    columns: dict[str, list] = {}
    rows = []
    for cell in shared:
        (_, row, column), kind = cell, base_cells[cell][0]
        if head_cells[cell][0] != kind:
            continue
        base, head = np.array(base_cells[cell][1]), np.array(head_cells[cell][1])
        ratio = float(_oriented(_best(base, kind), _best(head, kind), kind))
        pairings = _oriented(base[:, None], head[None, :], kind)
        rows.append({"row": row, "column": column, "kind": kind, "base": base.tolist(), "head": head.tolist(),
                     "ratio": round(ratio, 4),
                     "round_range": [round(float(pairings.min()), 4), round(float(pairings.max()), 4)],
                     "base_spread": round(_spread(base, kind), 4)})
        columns.setdefault(column, []).append((ratio, _spread(base, kind)))
    matched = len({r["row"] for r in rows})
    if matched < min_rows:
        return Comparison("insufficient", f"{matched} matched rows; PERF_MIN_ROWS is {min_rows}", rows,
                          matched_rows=matched)
    summary = {}
    for column, cells in columns.items():
        ratios = [ratio for ratio, _ in cells]
        low, high, confidence = median_interval(ratios)
        summary[column] = {"median_ratio": round(float(np.median(ratios)), 4), "samples": len(cells),
                           "eligible": len(cells) >= min_rows, "interval": [round(low, 4), round(high, 4)],
                           "interval_confidence": round(confidence, 4),
                           "noise_floor": round(float(np.median([spread for _, spread in cells])), 4)}
    eligible = {name: col for name, col in summary.items() if col["eligible"]}
    if not eligible:
        return Comparison("insufficient", f"no column has {min_rows} matched rows", rows, summary, matched_rows=matched)
    worst = min(eligible, key=lambda name: eligible[name]["median_ratio"])
    column = eligible[worst]
    low, high = column["interval"]
    interval = f"interval {low:.3f}-{high:.3f}, each end exact at {column['interval_confidence']:.1%}"
    verdict = Comparison("ok", "", rows, summary, worst, column["median_ratio"], (low, high), column["noise_floor"],
                         matched)
    if column["median_ratio"] < threshold and high < 1 - column["noise_floor"]:
        verdict.status = "regression"
        verdict.reason = (f"{worst}: head/base {column['median_ratio']:.3f} ({interval}, noise floor "
                          f"{column['noise_floor']:.3f}) is below {threshold} over {matched} rows")
    elif column["median_ratio"] < threshold:
        verdict.reason = (f"{worst}: head/base {column['median_ratio']:.3f} is below {threshold}, but the "
                          f"{interval} does not clear the noise floor {column['noise_floor']:.3f}")
    else:
        verdict.reason = f"worst column {worst}: head/base {column['median_ratio']:.3f} over {matched} rows"
    return verdict


def _samples(logs: list[dict]) -> dict:
    """{(signature, row, column): (kind, [one value per log])}"""
    cells: dict = {}
    for tables in logs:
        for (signature, row), values in tables.items():
            for column, (kind, value) in values.items():
                cells.setdefault((signature, row, column), (kind, []))[1].append(value)
    return cells


def best_of(base: list[float], head: list[float], kind: str) -> float:
    """The reference executor's rule: best sample per side (min latency, max throughput)."""
    if kind == "latency":
        return min(base) / min(head)
    return max(head) / max(base)


# -- what is timed -----------------------------------------------------------------------------------

@dataclass
class Entry:
    file: str
    argv: list[str]
    basis: str
    reason: str


def detect(text: str) -> tuple[str, str] | None:
    for first, second, args, basis in _HARNESSES:
        if first in text and (second is None or second in text):
            return args, basis
    return None


def _changed_modules(ctx: Context) -> set[str]:
    modules = set()
    for path, change in (ctx.head_view.changes.items() if ctx.head_view else []):
        pure = PurePosixPath(path)
        if pure.suffix == ".py" and change != "D":
            parts = list(pure.with_suffix("").parts)
            if parts and parts[-1] == "__init__":
                parts.pop()
            if parts:
                modules.add(".".join(parts))
    return modules


def _imports(text: str) -> set[str]:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return set()
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def choose_entry(ctx: Context) -> Entry | str:
    request = ctx.request
    if request.perf_args:
        argv = shlex.split(request.perf_args)
        if argv and argv[0].endswith(".py"):
            return Entry(argv[0], argv[1:], "declared-by-caller", "--perf-args names the bench and its arguments")
        return Entry(request.target_path, argv, "declared-by-caller", "--perf-args, on the correctness target")
    text = ctx.head_text(request.target_path) or ""
    found = detect(text)
    if found:
        return Entry(request.target_path, shlex.split(found[0]), "same-as-correctness-target", found[1])
    changed = _changed_modules(ctx)
    edited = ctx.head_view.changes if ctx.head_view else {}
    # one git grep narrows a large checkout to the files that mention a harness at all
    maybe = {path for path in ctx.worktree.grep_base([marker for marker, *_ in _HARNESSES]) if path not in edited}
    maybe |= {path for path, change in edited.items() if path.endswith(".py") and change != "D"}
    candidates = []
    for path in sorted(maybe - {request.target_path}):
        source = ctx.head_text(path) or ""
        if detect(source) and _imports(source) & changed:
            candidates.append(path)
    if len(candidates) == 1:
        args, basis = detect(ctx.head_text(candidates[0]) or "")
        return Entry(candidates[0], shlex.split(args), "discovered-bench",
                     f"the only bench with a harness that imports a changed module ({basis})")
    if candidates:
        return f"{len(candidates)} benches import a changed module ({', '.join(candidates[:4])}); name one with --perf-args"
    return "the target exposes no benchmark entry point and no bench imports a changed module"


# -- the stage -----------------------------------------------------------------------------------------

def _skip(note: str, **fields) -> StageResult:
    stage = result(NAME, "skip", note, **fields)
    return stage.finding("note", f"no perf comparison was made: {note}")


def run(ctx: Context) -> StageResult:
    request = ctx.request
    if request.no_perf:
        return result(NAME, "skip", "disabled with --no-perf: perf was not measured")
    if cpu_tier.active(ctx):
        return _skip("not measured: kernels ran in the Triton interpreter on the CPU, whose timings are never "
                     "perf evidence")
    blocked = correctness.gate(ctx)
    if blocked:
        return _skip(blocked)
    if not request.has_patch:
        return _skip("no patch: there is no base to time against")
    head = ctx.earlier.get(correctness.REPO_TESTS)
    if head is None or head.stage.status != "pass":
        return _skip("the head repo tests did not pass; timing a kernel that fails says nothing")
    claim = ctx.earlier.get(gpu_claim.NAME)
    if claim is None or claim.stage.status != "pass":
        return _skip("no GPU was claimed: timings without a locked device would not describe the kernel")
    entry = choose_entry(ctx)
    if isinstance(entry, str):
        return _skip(entry)
    on_base = ctx.worktree.exists_on_base(entry.file)
    fields = {"target": entry.file, "target_basis": entry.basis, "target_basis_reason": entry.reason,
              "command": " ".join(["python", entry.file, *entry.argv]), "threshold": request.host.perf_threshold,
              "min_rows": request.host.perf_min_rows}
    transplant = None
    if not on_base:
        if not request.perf_control_column:
            return _skip(f"{entry.file} is added by the PR: timing base would need a transplanted baseline, "
                         "which needs --perf-control-column", **fields)
        transplant = ctx.head_text(entry.file)
    fields["baseline_method"] = "target-transplant" if transplant is not None else "patch-reversed-same-worktree"

    logs: dict[str, list] = {"base": [], "head": []}
    runs, artifacts = [], []
    visible = gpu_claim.visible_devices(ctx)
    phase_roots = {"base": ctx.phase_roots.get("base", ctx.run_dir), "head": ctx.phase_roots.get("head", ctx.run_dir)}
    with ctx.worktree.handback():
        for round_number in range(1, request.host.perf_repeat + 1):
            for side in ("base", "head"):
                artifacts += ctx.worktree.to_base()
                try:
                    if side == "head":
                        ctx.worktree.apply(request.patch)
                    elif transplant is not None:
                        ctx.worktree.write_file(entry.file, transplant)
                except GitFailed as exc:
                    return _skip(f"the tree could not be switched to {side} for round {round_number}: {exc}", **fields)
                ctx.say(f"perf: round {round_number}/{request.host.perf_repeat}, {side}")
                timing = harness.time_run(request, phase_root=phase_roots[side], phase=side,
                                         label=f"{side}-perf-{round_number}", file=entry.file, argv=entry.argv,
                                         visible_devices=visible, run_dir=ctx.run_dir)
                runs.append(timing)
                logs[side].append(timing)
        artifacts += ctx.worktree.to_base()
    fields.update(bench_artifacts=sorted(set(artifacts)), base_log=logs["base"][0].log, head_log=logs["head"][0].log,
                  repeats={"base": len(logs["base"]), "head": len(logs["head"]), "order": "interleaved base/head",
                           "reduction": "best round per side"}, statistics=METHOD)
    failed = [f"{t.label} exit {t.exit}{' (timed out)' if t.timed_out else ''}" for t in runs if not t.passed]
    if failed:
        stage = _skip(f"a failed repeat poisons its side (a truncated run can look fast): {', '.join(failed)}", **fields)
        stage.runs = runs
        return stage
    comparison = compare([scrape(_read(t.log)) for t in logs["base"]], [scrape(_read(t.log)) for t in logs["head"]],
                         request.host.perf_threshold, request.host.perf_min_rows)
    stage = _compose(ctx, comparison, fields, transplant is not None)
    stage.runs = runs
    return stage


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as log:
            return log.read()
    except OSError:
        return ""


def _compose(ctx: Context, comparison: Comparison, fields: dict, transplanted: bool) -> StageResult:
    fields = {**fields, "matched_rows": comparison.matched_rows, "columns": comparison.columns, "rows": comparison.rows}
    if transplanted and comparison.status != "insufficient":
        control = next((name for name in comparison.columns if ctx.request.perf_control_column.lower() in name.lower()),
                       None)
        tolerance = ctx.request.host.perf_control_tol
        if control is None:
            return _skip(f"the control column {ctx.request.perf_control_column!r} is not in both logs; the "
                         "transplanted baseline is not believed", **fields)
        ratio = comparison.columns[control]["median_ratio"]
        fields.update(control_column=control, control_ratio=ratio)
        if abs(ratio - 1) > tolerance:
            return _skip(f"the control column {control} moved {abs(ratio - 1):.1%} across the two trees "
                         f"(PERF_CONTROL_TOL {tolerance:.0%}); the transplanted baseline is not believed", **fields)
        fields["control_note"] = f"the control column {control} reproduced within {abs(ratio - 1):.1%}"
    if comparison.status == "insufficient":
        return _skip(comparison.reason, **fields)
    fields.update(worst_column=comparison.worst_column, median_ratio=comparison.headline,
                  interval=list(comparison.interval),
                  interval_confidence=comparison.columns[comparison.worst_column]["interval_confidence"],
                  noise_floor=comparison.noise_floor)
    if comparison.status == "regression":
        worst = sorted((r for r in comparison.rows if r["column"] == comparison.worst_column), key=lambda r: r["ratio"])
        fields["regressed_rows"] = [r for r in worst if r["ratio"] < ctx.request.host.perf_threshold][:5]
        stage = result(NAME, "fail", comparison.reason, **fields)
        shown = "; ".join(f"{r['row']}: {_best(np.array(r['base']), r['kind']):g} -> "
                          f"{_best(np.array(r['head']), r['kind']):g}" for r in worst[:3])
        return stage.finding("should-fix", f"head is slower than base on the same locked GPU: {comparison.reason} "
                                           f"({shown})")
    return result(NAME, "pass", comparison.reason, **fields)
