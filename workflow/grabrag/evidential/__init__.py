"""Stage 6b, EvidentialRAG as an extra policy (EvidentialRAG paper, sections 3-4, Appendix B): the
method (masses, fusion, decision) and its runs in the workflow.

Per question, an evaluator LLM reads each retrieved passage on its own and returns one
claim with a non-negative evidence score (section 3.2). Claims are aligned into a frame
of distinguishable candidate answers (section 3.3), each passage's evidence becomes a
Dempster-Shafer mass function, the masses are fused with the conflict-preserving rule,
and the mass left on the whole frame routes the final answer (sections 3.4-3.5).

The method is pure, no model is loaded: :mod:`.fusion` (mass functions and fusion
rules), :mod:`.evaluator` (fold order, the evaluator's prompt, grammar and parse),
:mod:`.claims` (claim alignment, evidence vectors, the closed-book source) and
:mod:`.routing` (routes, route prompts, decisions and the lambda x tau sweep). The rules
call the evaluator and the generator with ``evaluator_messages`` / ``route_messages``
and store the raw outputs (:mod:`.evaluator_pass`, :mod:`.generator_pass`, reading back
through :mod:`.stored`); ``parse_evaluation``, ``question_masses``, ``decide`` and
``sweep`` then work from stored outputs only (:mod:`.sweep_tables`,
:mod:`.efficiency`).
"""
