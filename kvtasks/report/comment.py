"""comment.md: the report as a pull-request comment a bot can post.

The verdict and what decided it come first, then the findings (blocker, should-fix, note), then
the stages and the long texts (logs, tracebacks) folded in <details>. Everything a pull request or
its runs can put into a report (test ids, failure messages, file names and contents, notes) is
written as a code span or a fenced block: no @mention, #123 or GH-123 reference, link, autolink,
image, raw HTML or code fence can come out of it, and it copies as it was (a test id pastes into
pytest; no invisible character is ever inserted). The only HTML is the <details> and <summary> tags
this module writes, around kvtasks' own words.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable

COMMENT = "comment.md"
# where reports/ is served; comment.md links the report's page under it (--report-url sets it)
REPORT_URL_VARIABLE = "KVTASKS_REPORT_URL"
# a detail longer than this is cut in the list and shown whole in a <details> block
SHORT = 300
_SEVERITIES = (("blocker", "Blockers"), ("should-fix", "Should fix"), ("note", "Notes"))


def inline(text: object, in_table: bool = False) -> str:
    """One line of text from a PR or its runs, inert in GitHub Markdown and copyable as it is: a code
    span (whitespace collapsed), whose delimiter is longer than any run of backticks inside it.
    GitHub makes no mention, reference, link, autolink, emphasis or HTML inside a code span, and
    nothing is inserted into the text; in a table row a `|` is escaped, as GitHub's tables need
    even inside code."""
    flat = " ".join(str(text).split())
    if not flat:
        return ""
    if in_table:
        flat = flat.replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", flat)), default=0)
    delimiter = "`" * (longest + 1)
    padded = f" {flat} " if flat.startswith("`") or flat.endswith("`") else flat
    return f"{delimiter}{padded}{delimiter}"


def block(text: str) -> str:
    """A long text (a log, a traceback) as a fenced code block no line of it can close."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text.rstrip()}\n{fence}"


def folded(summary: str, text: str) -> list[str]:
    """`text` in a <details> block; `summary` is kvtasks' own words (a stage or rule name)."""
    return [f"<details><summary>{summary}</summary>", "", block(text), "", "</details>", ""]


def decided_by(report: dict, required: Iterable[str]) -> str:
    """What decided the verdict, in one line (`required`: the stages the verdict needed passing)."""
    required = set(required)
    findings = report["findings"]
    verdict = report["verdict"]
    if verdict in ("BLOCK", "NEEDS_WORK"):
        severity = "blocker" if verdict == "BLOCK" else "should-fix"
        rules = list(dict.fromkeys(f"`{f['rule']}` ({f['stage']})" for f in findings if f["severity"] == severity))
        return f"{len(rules)} {severity} rule{'s' if len(rules) != 1 else ''}: {', '.join(rules)}"
    if verdict == "PASS":
        return "every required stage passed, the suite was shown to fail with the route's output corrupted, " \
               "and the PASS gate holds"
    withheld = [f for f in findings if f["rule"] == "report.pass-withheld"]
    if withheld:
        return inline(withheld[0]["detail"])
    short = [f"{name} ({stage['status']})" for name, stage in report["stages"].items()
             if stage and stage.get("status") not in ("pass", "info") and name in required]
    return "required stages short of pass: " + (", ".join(short) if short else "the runtime identity is unknown")


def markdown(report: dict, required: Iterable[str], page_url: str | None = None) -> str:
    """The comment for one report (its JSON form)."""
    lines = [f"## kvtasks: **{report['verdict']}** for {inline(report['label'])}", "",
             f"**Decided by:** {report.get('decided_by') or decided_by(report, required)}", ""]
    target = (report.get("test_selection") or {}).get("target")
    if target:
        lines += [f"**Target:** {inline(target)}", ""]
    if page_url:
        lines += [f"[The full report]({_url(page_url)})", ""]
        served = page_url.rsplit("/", 2)[0]  # reports/, as served (page_url names <label>/index.html under it)
        logs = [f"[`{label}`]({_url(f'{served}/{path}')})" for label, path in (report.get("logs") or {}).items()]
        if logs:
            lines += ["Logs: " + " · ".join(logs), ""]
    repo = report.get("repo", {})
    lines += [f"base `{repo.get('base')}`, head `{repo.get('head') or 'not matched to a PR head'}`; "
              f"kvtasks {report.get('kvtasks_version', '?')}, report schema {report.get('schema_version', '?')}", ""]
    long_texts = []
    no_gpu = _about_no_gpu(report)
    for severity, title in _SEVERITIES:
        chosen = [f for f in report["findings"] if f["severity"] == severity and f not in no_gpu]
        if not chosen and not (severity == "note" and no_gpu):
            continue
        lines += [f"### {title}", ""]
        if severity == "note" and no_gpu:
            rules = ", ".join(dict.fromkeys(f"`{f['rule']}`" for f in no_gpu))
            lines.append(f"- no GPU was claimed, so PASS is out of reach and nothing was timed ({rules}; in full below)")
            long_texts.append(("No GPU", "\n".join(f"{f['rule']} ({f['stage']}): {f['detail']}" for f in no_gpu)))
        for finding in chosen:
            detail = finding["detail"]
            shown = inline(detail if len(detail) <= SHORT else detail[:SHORT] + " …")
            lines.append(f"- `{finding['rule']}` ({finding['stage']}): {shown}")
            if len(detail) > SHORT or "\n" in detail:
                long_texts.append((f"{finding['rule']} ({finding['stage']}), in full", detail))
        lines.append("")
    if not report["findings"]:
        lines += ["No findings.", ""]
    stages = [(name, stage) for name, stage in report["stages"].items() if stage]
    lines += ["<details><summary>Stages</summary>", "", "| stage | status | reason |", "| --- | --- | --- |",
              *(f"| {name} | {stage['status']} | {inline(stage.get('note', ''), in_table=True)} |"
                for name, stage in stages),
              "", "</details>", ""]
    for name, stage in stages:
        for field, value in stage.items():
            if field.endswith("_tail") and isinstance(value, str) and value.strip():
                long_texts.append((f"{name}: {field}", value))
    for summary, text in long_texts:
        lines += folded(summary, text)
    return "\n".join(lines).rstrip() + "\n"


def _about_no_gpu(report: dict) -> list[dict]:
    """The notes that only say no GPU was claimed (each stage says it its own way): one line in the
    comment, their words folded."""
    if report.get("degraded_mode") != "NO_GPU":
        return []
    return [f for f in report["findings"] if f["severity"] == "note"
            and (f["rule"].startswith("gpu.") or "no GPU was claimed" in f["detail"])]


def _url(prefix: str) -> str:
    """The page link, kvtasks' own: the prefix the maintainer gave, with the characters that would
    end a Markdown link destination percent-encoded."""
    return re.sub(r"[\s()<>]", lambda match: f"%{ord(match.group(0)):02X}", prefix)


def page_url(label: str) -> str | None:
    prefix = os.environ.get(REPORT_URL_VARIABLE, "").strip()
    return f"{prefix.rstrip('/')}/{label}/index.html" if prefix else None


def append_to_step_summary(text: str) -> None:
    """GitHub Actions shows $GITHUB_STEP_SUMMARY on the run's page; append the comment there."""
    target = os.environ.get("GITHUB_STEP_SUMMARY", "").strip()
    if target:
        with Path(target).open("a", encoding="utf-8") as summary:
            summary.write(text + "\n")
