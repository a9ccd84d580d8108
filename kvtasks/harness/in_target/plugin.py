"""The pytest plugin: `-p <name>.plugin` loads this module, whose one hook registers the run's Plugin
when pytest configures. The items it adds to a run carry ids pytest generates for their values and
no mark; it tells them apart by their index into the parametrize mark it made, and the validator
learns which is which from the receipt."""
import os
import sys
from dataclasses import asdict

import pytest

from . import grid, impact, loads, monitor, state
from .configuration import TierSettings
from .state import PytestLoaded

# the repository's hooks that see the whole session's outcome (in a merged session the poisoned cell
# makes it a failure), and those that can rewrite an item's report or outcome, or run its test
# function their own way (and so treat the items kvtasks added apart from the repository's)
_SESSION_HOOKS = ("pytest_sessionfinish", "pytest_terminal_summary", "pytest_unconfigure")
_REPORT_HOOKS = ("pytest_runtest_makereport", "pytest_runtest_logreport", "pytest_report_teststatus",
                 "pytest_runtest_protocol", "pytest_runtest_call", "pytest_pyfunc_call")
_PARTS = {"repo": 0, "grid": 1, "proof": 2}


def pytest_configure(config):
    run = state.current
    if run is None:  # an xdist worker: the configuration was gone before it started
        _tier_in_worker(config)
        return
    monitor.install()
    if run.configuration.merged:
        if getattr(config.option, "maxfail", 0):
            # the poisoned cell fails on purpose: -x or --maxfail must not end the session at it, nor
            # at a failing repository test before the grid's cells ran
            run.session.maxfail_dropped = config.option.maxfail
            config.option.maxfail = 0
        if getattr(config.option, "numprocesses", None):
            # the items run in xdist's workers, whose route calls this controller's receipt never sees
            run.session.xdist = f"-n {config.option.numprocesses}"
    config.pluginmanager.register(Plugin(run))
    if run.tier is not None:
        run.tier.register_pytest(config)


def _tier_in_worker(config):
    """An xdist worker of a run on the CPU tier installs the tier too, from what its controller handed
    it (the tier's settings are the same in a corrupted run and in the run it repeats)."""
    settings = getattr(config, "workerinput", {}).get(__package__)
    if settings is not None:
        from . import cpu_tier

        cpu_tier.install(TierSettings(**settings))
        cpu_tier.register_pytest(config)


def _pytest_loaded(config) -> PytestLoaded:
    """pytest's configuration file, rootdir and plugins: the checkout's plugin modules (conftest.py
    files, `-p` modules) and the installed distributions' plugins (entry points)."""
    rootdir = loads.in_checkout(str(config.rootpath) + os.sep + "x")
    plugins = sorted({path for _, plugin in config.pluginmanager.list_name_plugin()
                      if (path := loads.in_checkout(getattr(plugin, "__file__", None))) is not None})
    distributions = sorted({dist.project_name for _, dist in config.pluginmanager.list_plugin_distinfo()})
    return PytestLoaded(config_file=loads.in_checkout(str(config.inipath)) if config.inipath else None,
                        rootdir=None if rootdir is None else os.path.dirname(rootdir) or ".",
                        plugins=plugins, plugin_distributions=distributions)


def _repository_hooks(config, names) -> list[str]:
    """The implementations of `names` in the repository's own code: a conftest.py, a plugin module or
    an object a plugin registered, from under the rootdir or the checkout; pytest's own and installed
    packages' plugins (even in a virtual environment inside the checkout) are not the repository's."""
    roots = {os.path.realpath(str(config.rootpath)) + os.sep, os.path.realpath(os.getcwd()) + os.sep}
    found = []
    for name in names:
        for impl in getattr(config.hook, name).get_hookimpls():
            plugin = impl.plugin
            source = getattr(plugin, "__file__", None) or getattr(sys.modules.get(type(plugin).__module__), "__file__",
                                                                 None)
            module = loads.real_path(source or "/")
            if any(module.startswith(root) for root in roots) and not module.startswith(loads.installed()) \
                    and not loads.own(module):
                found.append(f"{os.path.relpath(module, os.path.realpath(str(config.rootpath)))}: {name}")
    return found


class Plugin:
    def __init__(self, run):
        self.run = run

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node):
        """pytest-xdist starts a worker: on the CPU tier, hand it the tier's settings."""
        if self.run.configuration.cpu_tier is not None:
            node.workerinput[__package__] = asdict(self.run.configuration.cpu_tier)

    @pytest.hookimpl(tryfirst=True)
    def pytest_generate_tests(self, metafunc):
        """Replace the cells of the parametrize mark (or the stacked marks) binding the grid's argnames
        with the grid; in a merged session, add the grid's cells and the poisoned cell beside the
        mark's own cells instead, which keep their values, ids and marks.

        Each grid row is a tuple of cell values, one per name. The names go to pytest as a list,
        never as one "a,b" string: a string naming one argument makes pytest take each row whole
        as that argument's value (a 1-tuple), while a list always unpacks a row into its names.
        No id is given: pytest makes each one from its values, as it does for the repository's.
        """
        run = self.run
        if not run.configuration.grid_argnames:
            return
        if run.configuration.merged:
            self._merge_grid(metafunc)
            return
        for marks in grid.grid_marks(run, metafunc):
            node, mark, _ = marks[0]
            names = [name for _, _, bound in marks for name in bound]
            if len(marks) == 1 and grid.replaced_before(run, metafunc, mark, names):
                continue
            rows, _ = grid.grid_rows(run, names)
            replacement = pytest.mark.parametrize(list(names), rows).mark
            grid.replace_mark(node, mark, replacement)
            for node, mark, _ in marks[1:]:  # stacked marks: the grid's rows carry all their names
                grid.replace_mark(node, mark, None)
            grid.made(run, metafunc, replacement, names[0], 0)

    def _merge_grid(self, metafunc):
        """The exact mark's own cells, then the grid's and the poisoned one, added once per mark."""
        run = self.run
        for marks in grid.grid_marks(run, metafunc):
            node, mark, names = marks[0]
            if len(marks) != 1 or grid.replaced_before(run, metafunc, mark, names):
                continue  # stacked marks' cells are a product: a joint row cannot be added to them
            rows, order = grid.grid_rows(run, names)
            poisoned = run.configuration.poisoned_row
            added = [pytest.param(*row) for row in rows] + [pytest.param(*(poisoned[i] for i in order))]
            own = list(mark.args[1]) if len(mark.args) > 1 else list(mark.kwargs.get("argvalues", []))
            kwargs = {key: value for key, value in mark.kwargs.items() if key not in ("argnames", "argvalues")}
            ids = kwargs.get("ids")
            if ids is not None and not callable(ids):
                kwargs["ids"] = [*list(ids), *([None] * len(added))]
            replacement = pytest.mark.parametrize(mark.args[0] if mark.args else mark.kwargs["argnames"],
                                                  own + added, **kwargs).mark
            grid.replace_mark(node, mark, replacement)
            grid.made(run, metafunc, replacement, names[0], len(own))
            run.session.merged_marks += 1

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session, config, items):
        """Which items are the grid's (and in a merged session, the poisoned cell's), by their index
        into the mark the plugin made, never by their ids; in a merged session the repository's own
        tests run first, then the grid's cells, the poisoned cell last: a cell that breaks the
        process (a CUDA context an out-of-bounds store poisoned) cannot touch the repository's
        tests, and the order within each part stays pytest's."""
        run = self.run
        if run.configuration.impact:
            items[:], dropped = impact.sample(items)
            if dropped:
                config.hook.pytest_deselected(items=dropped)
            impact.note_params(run, items)
        if not run.configuration.grid_argnames:
            return
        rows = len(run.configuration.grid_rows)
        for item in items:
            spec = getattr(item, "callspec", None)
            made = run.grid_functions.get(item.nodeid.partition("[")[0])
            if spec is None or made is None or made[0] not in spec.indices or spec.indices[made[0]] < made[1]:
                continue
            index = spec.indices[made[0]] - made[1]
            if index < rows:
                run.cells[item.nodeid] = index
            if run.configuration.merged:
                run.added[item.nodeid] = "grid" if index < rows else "proof"
        if run.configuration.merged:
            items[:] = sorted(items, key=lambda item: _PARTS[run.added.get(item.nodeid, "repo")])

    def pytest_collection_finish(self, session):
        self.run.progress(f"collected {len(session.items)}")  # the heartbeat's denominator

    def pytest_runtest_logstart(self, nodeid, location):
        self.run.test = nodeid
        self.run.progress(f"start {nodeid}")
        if self.run.configuration.impact:
            impact.item_begins()

    def pytest_runtest_logfinish(self, nodeid, location):
        self.run.test = ""
        if self.run.configuration.impact:
            impact.item_done(self.run, nodeid)
        self.run.judges_replaced.update(loads.judges_replaced())  # after teardown: a test's monkeypatch is undone

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        if self.run.configuration.impact:
            impact.item_started()
        try:
            yield
        finally:
            if self.run.configuration.impact:
                impact.item_stopped()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        self.run.corruption.failure(item.nodeid, call.excinfo)
        yield

    def pytest_runtest_logreport(self, report):
        run = self.run
        if run.configuration.merged and report.when == "teardown" and report.failed and report.nodeid in run.added:
            # a teardown failing on an added item is a higher-scoped fixture's, reported on the last item
            # that used it: alone, the repository's run would have reported it on one of its own
            run.added_teardown_failed.append(report.nodeid)
        run.corruption.outcome(report)

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session, exitstatus):
        """Outermost: the receipt is written after every other plugin finished; in a merged session it
        also says whether anything stopped the session early or rewrote its exit status."""
        run = self.run
        if run.configuration.merged:
            # a session told to stop (-x re-set by a conftest, a plugin's shouldstop) did not run every part
            stopped = session.shouldfail or session.shouldstop
            if stopped:
                run.session.session_stopped = str(stopped)
            run.session.session_hooks = _repository_hooks(session.config, _SESSION_HOOKS) or None
            run.session.report_hooks = _repository_hooks(session.config, _REPORT_HOOKS) or None
        run.pytest_loaded = _pytest_loaded(session.config)
        before = session.exitstatus
        yield
        if run.configuration.merged and session.exitstatus != before:
            run.session.exit_rewritten = f"{int(before)} -> {int(session.exitstatus)}"
        monitor.write_receipt(int(session.exitstatus))
