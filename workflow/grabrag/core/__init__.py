"""The ground every stage stands on: errors, atomic files, text normalisation, progress, the
context conditions, the policy registry and the job runner. Imports nothing of the stages."""
