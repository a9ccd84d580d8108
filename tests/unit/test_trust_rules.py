"""Every trust rule of the registry on its own examples: the PR it must blame, and the honest twin it must not."""
import pytest

from kvtasks.stages import test_policy
from kvtasks.sources.trust_rules import ROUTE, TRUST_RULES, Example
from tests.kit import stage_context


def findings(example: Example) -> list:
    stage = test_policy.run(stage_context(example.base, example.head, target=example.target, expected_route=ROUTE,
                                          **example.options))
    return stage.findings


@pytest.mark.parametrize("rule", TRUST_RULES, ids=lambda rule: rule.id)
def test_a_rule_blames_its_bad_example_at_its_severity_and_spares_its_twin(rule):
    blamed = [finding for finding in findings(rule.bad) if finding.rule == rule.id]
    assert blamed and {finding.severity for finding in blamed} == {rule.severity}
    assert not [finding for finding in findings(rule.good) if finding.rule == rule.id]


def test_the_registry_holds_each_id_once_and_every_one_is_a_policy_rule():
    ids = [rule.id for rule in TRUST_RULES]
    assert len(ids) == len(set(ids)) and all(rule_id.startswith("policy.") for rule_id in ids)
