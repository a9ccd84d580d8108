"""kvtasks: validate GPU-kernel pull requests by running them on base and head."""
from importlib import metadata

try:
    __version__ = metadata.version("kvtasks")
except metadata.PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
