"""The report: its model, the verdict and PASS gate, and its Markdown, chart and files. It runs
nothing, reads no evidence and imports nothing that launches targets (kvtasks.harness, the stages):
the pipeline hands it a Layout (kvtasks.report.layout) and the stored results to compose.

- model.py: the report's fields, stage objects, findings, test selection; SCHEMA_VERSION
- layout.py: a pipeline's stage objects, required stages and PASS requirements, and the model they make
- compose.py: stage results -> a judged report
- judge.py: the verdict and the PASS gate
- markdown.py, comment.py, chart.py: summary.md, comment.md, perf.png
- write.py: every file of a report, written atomically
"""
from kvtasks.report.compose import compose
from kvtasks.report.layout import Entry, Layout
from kvtasks.report.markdown import summary_markdown, tier_line
from kvtasks.report.model import (EXIT_CODES, SCHEMA_VERSION, ArchRun, Finding, Report, ReusedEvidence, Retry, Stage,
                                  TestSelection, Verdict)
from kvtasks.report.write import publish

__all__ = ["compose", "Entry", "Layout", "summary_markdown", "tier_line", "EXIT_CODES", "SCHEMA_VERSION", "ArchRun",
           "Finding", "Report", "ReusedEvidence", "Retry", "Stage", "TestSelection", "Verdict", "publish"]
