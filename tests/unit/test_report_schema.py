"""The report's JSON Schema is a published contract: it changes only together with SCHEMA_VERSION.

Each published version's schema is kept in tests/report_schemas/<version>.json and its digest here,
so a changed schema fails until it is saved as a new version, and a saved version cannot be
rewritten in place. The running kvtasks' version (a default in the schema) is no part of it.
"""
import hashlib
import json
import re
from pathlib import Path

from kvtasks.run.pipeline import REPORT
from kvtasks.report import SCHEMA_VERSION

SNAPSHOTS = Path(__file__).parent.parent / "report_schemas"
# version -> sha256 of its snapshot file, as published
PUBLISHED = {"1": "9f6e3b189e18bf272bf363542a63fd5e23377e5148e563cc60968459af2d1461",
             "2": "540289e50a65bf6018f39cc953e1e5bbd45f10a8e1374ffa4241793c7fd1678f",
             "3": "e30295e59c7025705407720e281ef6a1439bda9562e62f09d28e6b35e210646c",
             # semantic versions from here (docs/reference.md): 4.0.0 adds decided_by and the $id
             "4.0.0": "f18739fbc0edce8c35f7900db52ae31a83718789790b9da72b0934b3155ee3af",
             # 4.1.0 adds logs: each launch's log, copied beside the report, by a path relative to reports/
             "4.1.0": "dca9a311db35185f7b4dcded50cb0830e744dcfcef92d44133e9d7cc3f7698c6",
             # 4.2.0 adds cpu_tier.device_name: the device name torch.cuda answered on the CPU tier
             "4.2.0": "ebd08abe1547920fd161a8497a733313ba91f14ba524c2797d5f52eb6eaf4677",
             # 4.3.0 adds test_selection.unvalidated_changes: changed files no target of base's map validates
             "4.3.0": "3f1fd9bf8d7ad4af7bcd1ef91ab952546980dd46a08c0f2774105a0daf203322",
             # 4.4.0 adds test_selection.inferred: how base's impact map chose a target no configuration named
             "4.4.0": "049ba5a6bde931082903e639b20ad687c8a1db9b0b383f7adcb99f9cd079d31f"}


def schema_text() -> str:
    schema = REPORT.json_schema()
    schema["properties"]["kvtasks_version"].pop("default")
    return json.dumps(schema, indent=1, sort_keys=True) + "\n"


def test_the_schema_is_the_snapshot_of_its_version():
    snapshot = SNAPSHOTS / f"{SCHEMA_VERSION}.json"
    assert snapshot.exists(), f"schema version {SCHEMA_VERSION} has no snapshot: save schema_text() as {snapshot.name}"
    assert schema_text() == snapshot.read_text(), (
        "the report's JSON Schema changed: bump SCHEMA_VERSION and save the new schema as its snapshot")


def test_no_published_snapshot_is_rewritten():
    saved = {path.stem: hashlib.sha256(path.read_bytes()).hexdigest() for path in SNAPSHOTS.glob("*.json")}
    assert saved == PUBLISHED
    assert SCHEMA_VERSION in PUBLISHED


def test_the_version_is_semantic_and_the_schema_names_it_in_its_id():
    assert re.fullmatch(r"\d+\.\d+\.\d+", SCHEMA_VERSION)
    assert REPORT.json_schema()["$id"] == f"urn:kvtasks:validation-report:{SCHEMA_VERSION}"
