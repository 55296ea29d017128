"""The vllm engine tests run only where vLLM is installed (``make test-vllm`` builds ``.venv-vllm``).

vLLM on a CPU starts slowly (three processes import it), so each test module starts at most
one engine, with a small KV cache. Each module skips itself (with the reason) where vLLM
cannot be imported, e.g. in the main environment.
"""

import os

# GiB of RAM for the KV cache of vLLM's CPU build; the tiny model needs a few MB.
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
