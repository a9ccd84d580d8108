"""The independent shape grid: channel selection (`channel`, a prepare step that reads sources),
the base side (`base_runs`, inside the baseline's lend), a side's merged pytest session
(`merged_session`: repository tests, grid and poisoned cell in one launch), the correctness_grid stage (`head`), and
the reruns other stages make (`rerun` and `rerun_session` for sensitivity, `oracle_run` for the base oracle).

Modules by job: plan (cells, default grid, axes, independence), channel (the prepare step), proof
(poisoned runs), runs (launches and cell outcomes), stage (head: prove, run, judge). Nothing here
writes the report or applies the patch; the tree is borrowed through Worktree.lend.
"""
from kvtasks.stages.grid.channel import STAGE as CHANNEL_STAGE, channel
from kvtasks.stages.grid.plan import CHANNEL, NAME, default_grid
from kvtasks.stages.payloads import CorrectnessGrid
from kvtasks.stages.grid.runs import (Session, base_runs, base_side, canonical_row, merged_session, oracle_run, rerun,
                                     rerun_session)
from kvtasks.stages.grid.stage import STAGE, head

__all__ = ["CHANNEL", "CHANNEL_STAGE", "NAME", "STAGE", "CorrectnessGrid", "Session", "base_runs", "base_side", "canonical_row", "channel", "default_grid", "head", "merged_session",
           "oracle_run", "rerun", "rerun_session"]
