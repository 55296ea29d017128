"""An inference engine that forwards to a trivium model server (``trivium.models.server``).

It calls the server's ``/v1/trivium/*`` endpoints, which carry SamplingParams, token ids,
logprobs and the model version unchanged, so a workflow sees exactly what an in-process
engine would give it. The tokenizer is loaded locally (from the same model directory) because
the ModelWrapper renders chat templates and encodes prompts on the client side.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

import torch

from trivium.errors import UserError
from trivium.models.engine.base import GenerationOutput, InferenceEngine, SamplingParams, params_per_prompt
from trivium.models.server import output_from_dict


class ServerUnreachable(UserError):
    """No trivium model server answers at the given address."""


def server_root(base_url: str) -> str:
    """``http://host:port`` from either that or the ``.../v1`` base URL."""
    root = base_url.rstrip("/")
    return root.removesuffix("/v1")


def check_server(base_url: str, timeout: float = 5.0) -> dict:
    """The server's ``/health`` answer; ServerUnreachable when nothing (or something else) answers."""
    import httpx

    url = f"{server_root(base_url)}/health"
    try:
        response = httpx.get(url, timeout=timeout)
        response.raise_for_status()
        health = response.json()
    except (httpx.HTTPError, ValueError) as error:
        raise ServerUnreachable(f"no trivium model server answers at {url} ({error})") from None
    if health.get("status") != "ok":
        raise ServerUnreachable(f"{url} answered but is not a healthy trivium model server: {health}")
    return health


class RemoteEngine(InferenceEngine):
    def __init__(self, base_url: str, *, tokenizer_path: str, timeout: float = 600.0, api_key: str | None = None):
        import httpx
        from transformers import AutoTokenizer

        self.root = server_root(base_url)
        self.health = check_server(self.root)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
        except OSError as error:
            raise UserError(f"cannot load the tokenizer from {tokenizer_path!r}: {error}") from error
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        self._client = httpx.Client(base_url=self.root, timeout=timeout, headers=headers)
        self._version = int(self.health.get("model_version", 0))

    def _post(self, path: str, body: dict) -> dict:
        import httpx

        try:
            response = self._client.post(path, json=body)
        except httpx.TransportError as error:
            raise ServerUnreachable(f"lost the connection to the model server at {self.root} ({error})") from None
        if 400 <= response.status_code < 500:
            try:
                message = response.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = response.text
            raise UserError(f"the model server refused the request ({response.status_code}): {message}")
        response.raise_for_status()
        return response.json()

    def generate(
        self, prompts: list[list[int]], params: SamplingParams | Sequence[SamplingParams]
    ) -> list[list[GenerationOutput]]:
        per_prompt = params_per_prompt(prompts, params)
        answer = self._post("/v1/trivium/generate", {
            "prompts": [list(p) for p in prompts], "params": [asdict(p) for p in per_prompt]})
        self._version = int(answer["model_version"])
        return [[output_from_dict(o) for o in group] for group in answer["outputs"]]

    def compute_logprobs(self, sequences: list[list[int]], prompt_lengths: list[int]) -> list[torch.Tensor]:
        answer = self._post("/v1/trivium/logprobs", {
            "sequences": [list(s) for s in sequences], "prompt_lengths": list(prompt_lengths)})
        return [torch.tensor(values, dtype=torch.float32) for values in answer["logprobs"]]

    def update_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> int:
        raise NotImplementedError(
            "a remote model server's weights belong to the server process; load new weights there"
        )

    def version(self) -> int:
        return self._version

    def close(self) -> None:
        self._client.close()
