"""Every registered study declares the claims it judges (issue "Verdicts with power"): a study page lists them,
and ``results.build`` refuses a check that judges none of them."""
from experiments import checks, registry


def test_every_study_declares_claims_and_every_interval_claim_names_its_control():
    studies = registry.load_all()
    assert len(studies) >= 29
    undeclared = [name for name, s in studies.items() if not s.claims]
    assert undeclared == []
    for name, study in studies.items():
        for claim in study.claims:
            assert isinstance(claim, checks.Claim), name
            assert claim.exact or claim.control, (name, claim.name)


def test_no_study_uses_the_undeclared_constructors():
    assert not any(hasattr(checks, f) for f in ("at_most", "below", "at_least", "above", "between", "close_to", "equals"))
