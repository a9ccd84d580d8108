"""perf: base against head on the claimed GPU, with statistics that beat the noise.

One stage, cut by job: `entry` chooses what is timed, `scrape` reads timing rows from a log,
`stats` compares the rounds, `stage` runs them and declares the payload. Only `NAME` and `run` are
the pipeline's; nothing here writes the report.
"""
from kvtasks.stages.perf.stage import NAME, STAGE, run

__all__ = ["NAME", "STAGE", "run"]
