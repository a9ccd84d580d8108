"""perf scraping: the timing rows a bench printed, read from its log text.

Owns the formats (markdown and CSV tables, aiter's `[perf]` lines, triton.testing's pandas frame)
and what a column is (a row's key, a latency, a throughput, or measured and compared by nothing).
Never judges a comparison and never runs anything: text in, {(table signature, row key):
{column: (kind, value)}} out.
"""
from __future__ import annotations

import math
import re

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


def timing_value(cell: str) -> float | None:
    """The positive finite number a cell shows, its unit and thousands separators dropped; None for
    anything else (a name, zero, a negative, nan): only such a number can be a timing."""
    text = cell.replace(",", "").replace("%", "").strip()
    text = re.sub(r"[a-zµμ/]+$", "", text, flags=re.IGNORECASE).strip()
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value > 0 and math.isfinite(value) else None


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
        values = {h.strip(): (k, timing_value(c)) for h, k, c in zip(headers, kinds, cells)
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
                               if timing_value(m.group(2)) is not None}
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
                and not any(timing_value(c) for c in line.split(",")):
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
