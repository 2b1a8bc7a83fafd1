"""What became of a model's output when it was parsed, and the decision rules that follow
from a failed parse, declared once for every method and backend.

A generated row's ``parse_status`` is one of :data:`PARSE_STATUSES`; a decision row whose
policy's own output (or the closed-book answer it needs) could not be parsed has the rule
:data:`RULE_PARSE_FAILED` (:data:`RULE_CB_PARSE_FAILED`), whichever method made it.
"""

from __future__ import annotations

PARSE_OK, PARSE_REPAIRED, PARSE_FAILED = "ok", "repaired", "failed"
"""A generated row's ``parse_status``: parsed as the grammar says, parsed after a repair of
a cut-off or malformed output, or not parsed at all."""
PARSE_STATUSES = (PARSE_OK, PARSE_REPAIRED, PARSE_FAILED)

RULE_PARSE_FAILED = "parse_failed"
"""A decision row's rule when the policy's own output did not parse (no decision)."""
RULE_CB_PARSE_FAILED = "cb_parse_failed"
"""A decision row's rule when the closed-book answer a policy reads did not parse."""
