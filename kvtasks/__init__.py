"""kvtasks: validate GPU-kernel pull requests by running them on base and head."""
