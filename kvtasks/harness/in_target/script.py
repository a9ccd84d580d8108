"""The script runner: `python -m <name> FILE ARGS` runs FILE as `python FILE ARGS` would."""
import os
import sys

from . import monitor, state


def run_script(argv):
    """Run argv[0] with the routes watched; return its exit status, the receipt written whatever happens."""
    import runpy

    path = os.path.abspath(argv[0])
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(path)
    monitor.install()
    status = 0
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as exc:
        if exc.code is None:
            status = 0
        elif isinstance(exc.code, int):
            status = exc.code
        else:
            print(exc.code, file=sys.stderr)
            status = 1
    except BaseException as exc:
        import traceback

        traceback.print_exc()
        status = 1
        run = state.current
        if run is not None and run.tier is not None:
            run.tier.record_crash(None, exc)
    finally:
        if state.current is not None:
            monitor.write_receipt(status)
    return status
