"""kvtasks: validate GPU-kernel pull requests by running them on base and head."""


def __getattr__(name: str) -> str:
    """`kvtasks.__version__`, read from the installed metadata when first asked for: importing
    importlib.metadata costs every kvtasks process (the lease owner, guardians, each doit) 25 ms."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import metadata

    try:
        version = metadata.version("kvtasks")
    except metadata.PackageNotFoundError:  # imported from a source tree that was never installed
        version = "0+unknown"
    globals()["__version__"] = version
    return version
