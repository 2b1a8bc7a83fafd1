"""Claims one GPU for this model job before llama.cpp or torch loads (grabrag.core.devices).

The scripts of the GPU rules import it right after _grabrag_path and ahead of llama_cpp
and torch: CUDA reads CUDA_VISIBLE_DEVICES once, when it starts. A job that declares no
`gpu` resource claims nothing; run_rule logs the claim.
"""

import __main__
from grabrag.core import devices

_job = getattr(__main__, "snakemake", None)
if _job is not None and _job.resources.get("gpu", 0):
    devices.CLAIM = devices.claim_gpu()
