"""A fleet of GPU hosts on Ray: the driver (engine.py) schedules every (PR, architecture) of a batch
as Ray tasks (scheduler.py, its records in chains.py), the tasks run one pipeline group each on a
node of that architecture (node.py), the driver stores what they return and merges a PR's runs
into one report (arch_report.py); a GPU host joins the cluster with `validate-kernel-pr fleet-node`
(join.py). resources.py holds what the driver and a joining host agree on.

Ray is the optional extra `kvtasks[fleet]`; nothing here is imported by a local validation.
"""
