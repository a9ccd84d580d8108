"""Interpreter start-up in a process kvtasks launches with the checkout on its path: kvtasks copies
this file as `sitecustomize.py` and `usercustomize.py` into a folder first on that PYTHONPATH, so
the checkout's own start-up modules (which Python would import before anything kvtasks controls,
the probe included) are never the ones found. The interpreter's own (in its standard library or
site-packages, never on PYTHONPATH, which kvtasks builds) still runs, as it would without kvtasks.

Standard library only; it reads no configuration.
"""
import importlib.util
import os
import sys


def _interpreters_own(name):
    """The interpreter's own `name`.py: the first on sys.path outside every PYTHONPATH folder."""
    constructed = {os.path.realpath(folder) for folder in os.environ.get("PYTHONPATH", "").split(os.pathsep) if folder}
    for folder in sys.path:
        real = os.path.realpath(folder or os.curdir)
        candidate = os.path.join(real, name + ".py")
        if folder and real not in constructed and os.path.isfile(candidate):
            return candidate
    return None


def _run_the_interpreters_own(name):
    path = _interpreters_own(name)
    if path is None:
        return
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


if __name__ in ("sitecustomize", "usercustomize"):
    _run_the_interpreters_own(__name__)
