"""The OpenAI-shaped clients of a model wrapper (``wrapper.py``): ``openai_client`` calls the
wrapper in process; ``get_openai_client`` is the official client of the workflow's own HTTP
endpoint (``enable_openai_api``), whose calls are recorded like ``chat`` calls."""

from __future__ import annotations

from trivium.errors import UserError


class OpenAIClients:
    """Mixed into ``ModelWrapper``; reads its ``openai_base_url`` and ``openai_api_key``."""

    openai_base_url: str | None = None
    openai_api_key: str | None = None

    def get_openai_client(self):
        """The official ``openai.OpenAI`` client of this workflow's HTTP endpoint (``enable_openai_api``).

        Its base URL (``openai_base_url``) names this workflow's session, so the calls are
        recorded in this view's history like ``chat`` calls; agent frameworks that build their
        own client take ``openai_base_url``, ``openai_api_key`` and ``openai_model_name``.
        """
        from openai import OpenAI

        return OpenAI(base_url=self._checked_base_url(), api_key=self.openai_api_key or "none", max_retries=0)

    def get_openai_async_client(self):
        """Like ``get_openai_client``, an ``openai.AsyncOpenAI``."""
        from openai import AsyncOpenAI

        return AsyncOpenAI(base_url=self._checked_base_url(), api_key=self.openai_api_key or "none", max_retries=0)

    def _checked_base_url(self) -> str:
        if self.openai_base_url is None:
            raise UserError(
                "this model has no OpenAI-compatible HTTP endpoint: set explorer.rollout_model.enable_openai_api: "
                "true (or the auxiliary model's), or use model.openai_client() in process"
            )
        return self.openai_base_url

    def openai_client(self, *, model_name: str = "policy"):
        """A client shaped like ``openai.OpenAI`` that calls this wrapper in process."""
        from trivium.models.openai_client import OpenAIClient

        return OpenAIClient(self, model_name=model_name)

    def openai_async_client(self, *, model_name: str = "policy"):
        """A client shaped like ``openai.AsyncOpenAI`` that calls this wrapper in process."""
        from trivium.models.openai_client import AsyncOpenAIClient

        return AsyncOpenAIClient(self, model_name=model_name)
