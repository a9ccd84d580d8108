"""The front doors: the installed CLI, doit's task creators, the task graph they run, the cache
commands, the targets a PR's configuration names, and the generated documentation tables.
"""
