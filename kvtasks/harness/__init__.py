"""The harness: what runs a target and reads back what it did.

`launching` runs one target (the constructed environment, the probe, the launch, what the run left
behind), `launch` the process itself, `replaying` a replay; `target_run` is the record a run leaves,
which the stages judge. The in-target package (`in_target`) is what runs inside the target's process.
Only the executor (kvtasks.run.executor) and the tools around it launch: a stage never does.
"""
