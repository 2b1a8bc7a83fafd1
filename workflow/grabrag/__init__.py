"""GRAB-RAG: abstention under missing and misleading retrieved evidence.

Plain library code: no Snakemake in here. The rule scripts in ``workflow/scripts``
unpack ``snakemake.input/params/output`` and call these modules.
"""

__version__ = "0.1.0"
