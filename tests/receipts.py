"""Receipts for recorded runs: a read-back receipt of a run that called nothing, with the fields a
test names (nested parts as the JSON they are written as), validated against the shared definition."""
from pydantic import TypeAdapter

from kvtasks.harness.receipts import StampedReceipt

_NOTHING_CALLED = {"nonce": "recorded", "route": "", "kernel_symbols": [], "route_calls": {}, "unresolved_routes": [],
                   "executed_shapes": [], "shape_vars": [], "exit_status": 0, "route_outputs": [], "loaded": {},
                   "judges_replaced": [], "written_arguments": {}}


def receipt(**fields) -> StampedReceipt:
    return TypeAdapter(StampedReceipt).validate_python({**_NOTHING_CALLED, **fields})
