"""`python -m <name> --pytest ARGS...` runs pytest with this package's plugin; `python -m <name> FILE
ARGS...` runs FILE as `python FILE ARGS` would."""
import sys

from . import monitor, script

if sys.argv[1:2] == ["--pytest"]:
    import pytest

    monitor.install()  # a route module a conftest.py imports is watched from its first import
    # by name, so pytest-xdist's workers load the plugin too (the configuration is gone by then: they
    # watch nothing and never corrupt)
    sys.exit(pytest.main(["-p", f"{__package__}.plugin", *sys.argv[2:]]))
sys.exit(script.run_script(sys.argv[1:]))
