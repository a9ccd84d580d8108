"""The in-target package: runs inside the target process and writes its execution receipt.

kvtasks copies this folder, under a random package name, into a folder of its own for each launch,
placed first on the target's PYTHONPATH. The process starts as `python -m <name>`: it runs pytest
with the package's plugin (`--pytest ARGS...`) or a script (`FILE ARGS...`, which executes FILE
under runpy with run_name="__main__"), so both runners produce a receipt. The receipt is written
on every exit path: session finish, the script's `finally`, and atexit.

The launch's configuration (routes, shape vars, receipt path, nonce, grid, CPU tier and what to
corrupt, if anything) is a file named by the environment variable spelt as this package's name in
capitals. Importing the package reads that file and removes both the file and the variable before
it imports anything but os: the checkout is on the path ahead of the standard library, so a
module of its own may stand in for one the package imports, and pytest reads its configuration
(whose addopts may name a plugin of the repository's, loaded before any `-p` of the command line)
and any conftest or script runs only after. What the configuration said about corruption lives only
in the closures of the one function every route call passes through; module attributes, hooks,
files, argv and environment are the same in a corrupted run and in the ordinary run it repeats.
Code that inspects the route's wrapper, walks the stack, scans `gc` or finds this package by its
code can still read what it holds (the README's trust model says so).

Imported by kvtasks itself (for the receipt's definition, the grid's cell coercion, the tier's
constants) no such variable exists and the package watches nothing. Standard library only; every
import inside it is relative, so the renamed copy is whole.
"""
import os


def _take_configuration():
    """This launch's configuration text, or None; the variable and the file are gone once read."""
    path = os.environ.pop(__name__.upper(), None)
    if not path:
        return None
    try:
        with open(path) as handle:
            text = handle.read()
        os.unlink(path)
    except OSError:
        return None
    return text


def _start():
    text = _take_configuration()
    if text is not None:
        from . import monitor

        monitor.start(text)


_start()
