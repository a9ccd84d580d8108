"""One validation's run: the pipeline's table, the groups it runs (phases), the executor that
launches what stages ask for, a batch of PRs, and `check`.
"""
