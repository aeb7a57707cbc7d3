"""The silent MPS errors of issue 29, each on a faked Mac: Apple-silicon host facts and torch.mps's public
calls faked from PyTorch's real texts and behaviour, so MpsDevice's own code answers every device question.

The PyTorch facts each test rests on are quoted in docs/devices.md ("Mac: what braeburn does for you").
"""

from __future__ import annotations

import functools

import pytest
import torch
import torch.utils.checkpoint

from braeburn.plan import RunOptions, make_plan
from braeburn.trainer.config import TrainingConfig
from braeburn.trainer.hf_compat import prepare_model_options
from tests.conftest import APPLE_M, LINUX_CPU


# -- 1. gradient checkpointing replays the MPS random state ------------------------------------------------
class FakeMpsGenerator:
    """The MPS generator as torch.utils.checkpoint sees it: a generator it neither stashes nor restores
    (torch.mps has no `_initialized`), reached by braeburn only through torch.mps.get_rng_state/set_rng_state."""

    def __init__(self, seed: int = 0):
        self.generator = torch.Generator().manual_seed(seed)

    def install(self, monkeypatch) -> None:
        monkeypatch.setattr(torch.mps, "get_rng_state", lambda device="mps": self.generator.get_state())
        monkeypatch.setattr(torch.mps, "set_rng_state", lambda state, device="mps": self.generator.set_state(state))


class MpsDropout(torch.nn.Module):
    """Dropout whose mask comes from the (fake) MPS generator, as nn.Dropout's does on an MPS tensor."""

    def __init__(self, generator: torch.Generator, p: float = 0.5):
        super().__init__()
        self.generator, self.p = generator, p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keep = torch.rand(x.shape, generator=self.generator) >= self.p
        return x * keep / (1 - self.p)


class CheckpointedNet(torch.nn.Module):
    """gradient_checkpointing_enable as Transformers' PreTrainedModel has it: the kwargs go to checkpoint()."""

    def __init__(self, generator: torch.Generator):
        super().__init__()
        torch.manual_seed(0)
        self.first, self.drop, self.last = torch.nn.Linear(8, 32), MpsDropout(generator), torch.nn.Linear(32, 1)
        self.checkpoint = None

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None):
        kwargs = {"use_reentrant": True} if gradient_checkpointing_kwargs is None else gradient_checkpointing_kwargs
        self.checkpoint = functools.partial(torch.utils.checkpoint.checkpoint, **kwargs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        block = lambda h: self.drop(torch.relu(self.first(h)))  # noqa: E731
        return self.last(self.checkpoint(block, x) if self.checkpoint else block(x))


def _gradients(model: torch.nn.Module, generator: torch.Generator) -> list[torch.Tensor]:
    generator.manual_seed(1)
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(2))
    model(x).pow(2).mean().backward()
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("kwargs", [None, {"use_reentrant": False}])
def test_item1_checkpointing_on_a_mac_gives_the_gradients_of_the_plain_forward(fake_host, monkeypatch, kwargs):
    # What this shows: braeburn's recompute draws the same mask from the generator torch does not replay (the
    # stand-in for the MPS one), so the gradients equal those without checkpointing. It does not run Metal.
    host = fake_host("apple")
    fake = FakeMpsGenerator()
    fake.install(monkeypatch)
    expected = _gradients(CheckpointedNet(fake.generator), fake.generator)
    model = CheckpointedNet(fake.generator)
    prepare_model_options(model, TrainingConfig(gradient_checkpointing=True, gradient_checkpointing_kwargs=kwargs),
                          make_plan(RunOptions(), host).device, host)
    for got, want in zip(_gradients(model, fake.generator), expected):
        torch.testing.assert_close(got, want)


def test_item1_without_the_replay_the_gradients_differ(fake_host, monkeypatch):
    # The defect itself, so the test above cannot pass by accident: the same model on a kind torch replays
    # (the CPU) gets no help from braeburn, and the stand-in generator then draws a second mask.
    fake = FakeMpsGenerator()
    fake.install(monkeypatch)
    expected = _gradients(CheckpointedNet(fake.generator), fake.generator)
    model = CheckpointedNet(fake.generator)
    prepare_model_options(model, TrainingConfig(gradient_checkpointing=True,
                                                gradient_checkpointing_kwargs={"use_reentrant": False}),
                          make_plan(RunOptions(), LINUX_CPU).device, LINUX_CPU)
    assert not torch.allclose(_gradients(model, fake.generator)[0], expected[0])


def test_item1_reentrant_checkpointing_on_a_mac_is_refused_with_the_fix(fake_host):
    host = fake_host("apple")
    model = CheckpointedNet(torch.Generator())
    config = TrainingConfig(gradient_checkpointing=True, gradient_checkpointing_kwargs={"use_reentrant": True})
    with pytest.raises(ValueError, match=r'gradient_checkpointing_kwargs=.*use_reentrant.*: false.*gradient_checkpointing off'):
        prepare_model_options(model, config, make_plan(RunOptions(), host).device, host)
