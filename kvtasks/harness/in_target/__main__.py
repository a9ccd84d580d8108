"""`python -m <name> --pytest ARGS...` runs pytest with this package's plugin; `python -m <name> FILE
ARGS...` runs FILE as `python FILE ARGS` would."""
import gc
import sys

from . import monitor, script

# Every object alive now belongs to the interpreter, pytest, this package or the CPU tier (torch),
# none to the repository's conftest, tests or routes, which have not run yet: frozen, no
# collection walks them again. A run's collections (the automatic ones, and pytest's two in full
# as its session ends, its check for unraisable exceptions) took a seventh of a small target's CPU
# time walking them; the repository's own objects are collected as they always are.
if sys.argv[1:2] == ["--pytest"]:
    import pytest

    monitor.install()  # a route module a conftest.py imports is watched from its first import
    gc.freeze()
    # by name, so pytest-xdist's workers load the plugin too (the configuration is gone by then: they
    # watch nothing and never corrupt)
    sys.exit(pytest.main(["-p", f"{__package__}.plugin", *sys.argv[2:]]))
gc.freeze()
sys.exit(script.run_script(sys.argv[1:]))
