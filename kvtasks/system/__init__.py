"""What every layer uses of the operating system: processes and their containment (cgroups),
locks, whole-file writes, fault points, progress lines.
"""
