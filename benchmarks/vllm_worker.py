"""Times vLLM's offline ``LLM.generate`` for ``engine_vs_generate.py``, in vLLM's own interpreter.

vLLM pins its own transformers and torch builds, so it usually lives in a separate virtual
environment (``make vllm-env`` builds ``.venv-vllm``). The benchmark starts this script with
that interpreter, once, and sends it one JSON request per line on stdin:

    {"prompts": [[token ids], ...], "max_new_tokens": 64}

and reads back ``{"tokens": N, "seconds": S}``: the tokens produced and the wall time of the
``generate`` call alone. The model loads once, before the first line ``{"ready": ...}``.

    python benchmarks/vllm_worker.py MODEL_DIR --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--threads", type=int, default=None, help="OpenMP threads for vLLM's CPU worker")
    parser.add_argument("--max-model-len", type=int, default=128)
    args = parser.parse_args()
    if args.threads:
        # vLLM binds its OpenMP threads to these cores; the same count the other paths use.
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{args.threads - 1}")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; the tiny model needs little

    # vLLM and the engine processes it spawns log to file descriptor 1: the protocol keeps
    # the original stdout, and descriptor 1 becomes stderr for everything else.
    protocol = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())

    import vllm
    from vllm import LLM, SamplingParams
    llm = LLM(model=args.model, dtype="float32", max_model_len=args.max_model_len, seed=0)
    protocol.write(json.dumps({"ready": True, "vllm": vllm.__version__}) + "\n")
    protocol.flush()
    for line in sys.stdin:
        request = json.loads(line)
        new_tokens = int(request["max_new_tokens"])
        params = SamplingParams(
            temperature=1.0, top_p=1.0, max_tokens=new_tokens, min_tokens=new_tokens, ignore_eos=True
        )
        prompts = [{"prompt_token_ids": ids} for ids in request["prompts"]]
        start = time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        seconds = time.perf_counter() - start
        tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
        protocol.write(json.dumps({"tokens": tokens, "seconds": seconds}) + "\n")
        protocol.flush()


if __name__ == "__main__":  # vLLM starts its engine in a spawned process, which re-imports this file
    main()
