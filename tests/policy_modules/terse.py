"""A policy from outside the library, for the registry's tests: TERSE abstains when P1's
answer is longer than ``max_words`` words (``policies.options.TERSE.max_words``), else
keeps P1's row. Loading this module (``policies.modules``) registers it."""

from grabrag.core import registry
from grabrag.policies.paper import single_pass_decisions

NAME = "TERSE"
TOO_LONG = "too_long"


def decide(inputs, settings):
    rows = []
    for row in single_pass_decisions(inputs["P1"], "P1"):
        row["policy"] = NAME
        if row["decision"] == "answer" and len(row["answer"].split()) > settings["max_words"]:
            row.update(decision="abstain", answer="", confidence=0, rule=TOO_LONG)
        rows.append(row)
    return rows


registry.register(
    registry.Policy(NAME, decide, {"P1": registry.GENERATION}, label="TERSE (short answers)")
)
