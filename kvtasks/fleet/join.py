"""`validate-kernel-pr fleet-node --address HOST:PORT`: a GPU host joins the cluster.

It asks the built-in picker's libraries which GPUs the host has and starts Ray on it (`ray start`)
advertising one custom resource per architecture (`kvtasks-arch:gfx942` = the number of GPUs of that
arch) and `num_gpus`, so the driver's (PR, arch) tasks land only on hosts of their arch. A host
without a GPU is refused with the picker's reason.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from collections import Counter

from kvtasks.fleet.resources import arch_resources
from kvtasks.gpu import BackendUnavailable, picker


def host_archs() -> tuple[Counter, str]:
    """GPUs per arch on this host, and the picker's reason when there are none."""
    backends, failures = picker.open_backends()
    archs: Counter = Counter()
    try:
        for backend in backends:
            try:
                archs.update(device.arch for device in backend.devices())
            except BackendUnavailable as exc:
                failures.append(str(exc))
    finally:
        for backend in backends:
            backend.close()
    if archs:
        return archs, ""
    return archs, picker.pick().message


def ray_start_command(address: str, archs: Counter, block: bool = False) -> list[str]:
    resources = arch_resources(archs)
    ray = shutil.which("ray") or "ray"
    return [ray, "start", f"--address={address}", f"--num-gpus={sum(archs.values())}",
            f"--resources={json.dumps(resources, separators=(',', ':'))}", *(["--block"] if block else [])]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="validate-kernel-pr fleet-node",
                                     description="join a kvtasks fleet (a Ray cluster) as a GPU host")
    parser.add_argument("--address", required=True, help="the Ray head, HOST:PORT")
    parser.add_argument("--dry-run", action="store_true", help="print the ray start command instead of running it")
    parser.add_argument("--block", action="store_true",
                        help="stay in the foreground while the node runs (a Slurm step, a container's command)")
    args = parser.parse_args(argv)
    archs, reason = host_archs()
    if not archs:
        print(f"validate-kernel-pr: error: this host has no GPU to offer the fleet: {reason}", file=sys.stderr)
        return 2
    command = ray_start_command(args.address, archs, args.block)
    if args.dry_run:
        print(" ".join(command))
        return 0
    if shutil.which("ray") is None:
        print("validate-kernel-pr: error: fleet-node needs Ray: pip install 'kvtasks[fleet]'", file=sys.stderr)
        return 2
    return subprocess.run(command).returncode
