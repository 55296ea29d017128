"""The vllm engine tests run only where vLLM is installed (``make test-vllm`` builds ``.venv-vllm``).

vLLM on a CPU starts slowly (three processes import it), so each test module starts at most
one engine, with a small KV cache.
"""

import os

import pytest

pytest.importorskip(
    "vllm", reason="vLLM is not installed in this interpreter; `make test-vllm` runs these tests in .venv-vllm"
)

# GiB of RAM for the KV cache of vLLM's CPU build; the tiny model needs a few MB.
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
