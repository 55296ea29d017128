"""Lazy modules: nothing is imported until the first attribute read, then the name is the module itself."""

from __future__ import annotations

import inspect
import sys

import torch

from trivium.lazy import lazy_module, no_grad


def test_a_lazy_module_imports_on_first_use_and_then_is_the_module(tmp_path, monkeypatch):
    (tmp_path / "trivium_lazy_target.py").write_text("IMPORTS = []\nIMPORTS.append(1)\nVALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "trivium_lazy_target", raising=False)
    namespace: dict = {}
    namespace["target"] = lazy_module("trivium_lazy_target", namespace)
    assert "trivium_lazy_target" not in sys.modules

    assert namespace["target"].VALUE == 42
    module = sys.modules["trivium_lazy_target"]
    assert namespace["target"] is module  # later reads skip the stand-in
    assert module.IMPORTS == [1]  # imported once


def test_the_algorithm_modules_hold_torch_itself_once_used():
    from trivium.algorithm import advantages, grouping

    advantages.ADVANTAGE_FNS.get("grpo")(
        token_level_rewards=torch.tensor([[0.0, 1.0], [0.0, 0.0]]), response_mask=torch.ones(2, 2),
        group_ids=torch.tensor([0, 0]),
    )
    advantages.torch.ones(1)  # a first use in this module, whichever tests ran before
    assert advantages.torch is torch and grouping.torch is torch


def test_no_grad_keeps_the_signature_and_computes_without_gradients():
    @no_grad
    def scaled(values: torch.Tensor, *, factor: float = 2.0) -> torch.Tensor:
        return values * factor

    weights = torch.ones(3, requires_grad=True)
    assert not scaled(weights).requires_grad
    assert torch.is_grad_enabled()
    assert list(inspect.signature(scaled).parameters) == ["values", "factor"]
    assert scaled.__name__ == "scaled"
