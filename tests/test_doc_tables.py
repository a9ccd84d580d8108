"""The generated documentation tables are the code's, and every finding kvtasks can emit names a rule
the table lists (and every listed rule is one kvtasks emits)."""
import re
from pathlib import Path

from kvtasks import rules
from kvtasks.front import doc_tables
from kvtasks.sources.trust_rules import TRUST_RULES

PACKAGE = Path(rules.__file__).resolve().parent
# a rule written where a finding is made: .finding("rule", ...), Finding(rule="rule", ...) or returned by
# target_runs.attribute as f"{what}.suffix" (what: target or grid)
LITERAL = re.compile(r"""(?:\.finding\(|rule=)\s*"([a-z-]+\.[a-z-]+)\"""")
ATTRIBUTED = re.compile(r"""return f"\{what\}\.([a-z-]+)\"""")


def emitted_rules() -> set[str]:
    # test_policy emits each trust rule of the registry; tests/unit/test_trust_rules.py shows each one emitted
    found = {rule.id for rule in TRUST_RULES}
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        found |= set(LITERAL.findall(text))
        found |= {f"{what}.{suffix}" for suffix in ATTRIBUTED.findall(text) for what in ("target", "grid")}
    return found


def test_the_rules_page_is_the_rule_table():
    assert (doc_tables.DOCS / "rules.md").read_text() == doc_tables.rules_page()


def test_the_architecture_stage_table_is_the_pipeline():
    page = (doc_tables.DOCS / "architecture.md").read_text()
    assert doc_tables.architecture_page(page) == page
    for row in doc_tables.PIPELINE["head"]:
        assert f"{row.name} (`" in page


def test_every_emitted_rule_is_listed_and_every_listed_rule_is_emitted():
    emitted = emitted_rules()
    assert sorted(emitted - set(rules.RULES)) == []
    assert sorted(set(rules.RULES) - emitted) == []


def test_a_finding_with_an_unlisted_rule_is_refused():
    import pytest
    from pydantic import ValidationError

    from kvtasks.stages import Finding

    with pytest.raises(ValidationError):
        Finding(rule="no.such-rule", severity="note", stage="merge_sim", detail="x")
