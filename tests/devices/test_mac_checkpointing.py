"""Gradient checkpointing on MPS, on a faked Mac whose torch behaves as torch 2.13 does: the right gradients however
it was turned on (braeburn replays the MPS random state that ``torch.utils.checkpoint`` does not stash: ``torch.mps``
has no ``_initialized``), or a refusal with the reason. The other facts braeburn states about a Mac are in
test_mac_facts.py.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.checkpoint import checkpoint as checkpoint_bound_at_import  # (the escape hatch case)

from braeburn.devices.mps import MpsDevice
from tests.devices.test_mac import fake_mac  # noqa: F401  (a fixture)
from tests.devices.test_mac_silent_errors import FakeMpsGenerator, MpsDropout


# -- gradient checkpointing on MPS: the right gradients however it was turned on, or a refusal with the reason ------
def tiny_gpt2(generator: torch.Generator, dropout: float = 0.3) -> torch.nn.Module:
    """A 2-layer GPT-2 whose dropout layers draw from the stand-in MPS generator, as nn.Dropout on MPS tensors
    draws from the MPS one (attention dropout stays 0: its draws come from the CPU generator, which torch replays)."""
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16, attn_pdrop=0.0,
                                     resid_pdrop=dropout, embd_pdrop=dropout)
    model = transformers.GPT2LMHeadModel(config)
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Dropout):
                setattr(module, child_name, MpsDropout(generator, dropout))
    return model


def gpt2_gradients(accelerator, model, generator: torch.Generator) -> list[torch.Tensor]:
    model.train()
    generator.manual_seed(1)
    ids = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(2))
    accelerator.backward(model(input_ids=ids, labels=ids).loss)
    return [p.grad.clone() for p in model.parameters()]


def enable_checkpointing(model: torch.nn.Module, kwargs: dict | None = None) -> None:
    """Checkpointing turned on by the installed Transformers' own name: ``activation_checkpointing_enable``
    (Transformers 5.23+), else ``gradient_checkpointing_enable`` (the only name before, 5.17 among them)."""
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(kwargs)
    else:
        model.gradient_checkpointing_enable(kwargs)


@pytest.mark.parametrize("enable", [
    lambda model: enable_checkpointing(model),
    lambda model: enable_checkpointing(model, {"use_reentrant": True}),
    lambda model: model.gradient_checkpointing_enable(),  # the older name (deprecated in 5.23+), as PEFT still calls it
    "trainer",  # the Trainer's gradient_checkpointing=True: its context_fn replays, and is not wrapped again
], ids=["current_name", "reentrant", "gradient_checkpointing_enable", "trainer"])
def test_checkpointing_turned_on_on_a_transformers_model_replays_the_mps_random_state(fake_mac, monkeypatch, enable):
    from braeburn import Accelerator

    fake = FakeMpsGenerator()
    fake.install(monkeypatch)
    accelerator = Accelerator()
    expected = gpt2_gradients(accelerator, accelerator.prepare(tiny_gpt2(fake.generator)), fake.generator)
    model = tiny_gpt2(fake.generator)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        if enable == "trainer":
            from braeburn.devices.host import current_host
            from braeburn.trainer.config import TrainingConfig
            from braeburn.trainer.checkpointing import prepare_model_options

            prepare_model_options(model, TrainingConfig(gradient_checkpointing=True), accelerator.plan.device,
                                  current_host())
            # the installed Transformers' current name, as its Trainer calls it: no deprecation warning
            assert [w for w in said if issubclass(w.category, FutureWarning)] == []
        else:
            enable(model)  # by the user, or a library, before braeburn sees the model
    model = accelerator.prepare(model)
    wrapped = [getattr(m._gradient_checkpointing_func, "replays_rng", False) for m in model.transformer.h]
    assert wrapped == [enable != "trainer"] * 2
    for got, want in zip(gpt2_gradients(accelerator, model, fake.generator), expected):
        torch.testing.assert_close(got, want)  # was: different dropout masks in the recompute, no error
    accelerator.end_training()


class BlockCheckpointedNet(torch.nn.Module):
    """A user's module that checkpoints its block itself, looking torch.utils.checkpoint.checkpoint up when called
    (``how="module"``) or through a name bound when its file was imported (``how="bound"``)."""

    def __init__(self, generator: torch.Generator, how: str, p: float = 0.5, reentrant: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.first, self.last = torch.nn.Linear(8, 32), torch.nn.Linear(32, 1)
        self.drop = MpsDropout(generator, p) if p else torch.nn.Identity()  # dropout(p=0) draws nothing
        self.how, self.reentrant = how, reentrant

    def forward(self, x):
        block = lambda h: self.drop(torch.relu(self.first(h)))  # noqa: E731
        if self.how == "module":
            h = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=self.reentrant)
        elif self.how == "no-replay":  # the caller asks torch not to preserve the random state
            h = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=self.reentrant, preserve_rng_state=False)
        elif self.how == "sequential":
            # two segments: the first, checkpointed, holds the dropout (which commutes with the ReLU)
            layers = torch.nn.Sequential(self.first, self.drop, torch.nn.ReLU(), torch.nn.Identity())
            h = torch.utils.checkpoint.checkpoint_sequential(layers, 2, x, use_reentrant=False)
        elif self.how == "bound":
            h = checkpoint_bound_at_import(block, x, use_reentrant=self.reentrant)
        elif self.how == "nested":  # a checkpointed function that checkpoints in its turn, also in the recompute
            inner = lambda h: checkpoint_bound_at_import(self.drop, h, use_reentrant=self.reentrant)  # noqa: E731
            outer = lambda h: torch.relu(self.first(h))  # noqa: E731  (dropout commutes with the ReLU)
            h = torch.utils.checkpoint.checkpoint(lambda h: inner(outer(h)), x, use_reentrant=self.reentrant)
        else:
            h = block(x)
        return self.last(h)


def net_gradients(accelerator, model, generator: torch.Generator) -> list[torch.Tensor]:
    generator.manual_seed(1)
    # an input that requires grad: reentrant checkpointing gives the block's weights no gradient otherwise
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(2)).requires_grad_()
    accelerator.backward(model(x).pow(2).mean())
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("how, reentrant", [("module", False), ("module", True), ("sequential", False),
                                           ("bound", False), ("bound", True), ("nested", False), ("nested", True)])
def test_torch_utils_checkpoint_inside_a_users_forward_replays_the_mps_random_state(fake_mac, monkeypatch, how,
                                                                                    reentrant):
    # "bound": a checkpoint function bound at import, before braeburn patched anything (it used to stop the
    # backward); "nested": the checkpoints a recompute calls (the reentrant one used to stop the backward, telling
    # the user to call checkpoint as they did)
    from braeburn import Accelerator

    fake = FakeMpsGenerator()
    fake.install(monkeypatch)
    accelerator = Accelerator()
    expected = net_gradients(accelerator, accelerator.prepare(BlockCheckpointedNet(fake.generator, "none")),
                             fake.generator)
    model = accelerator.prepare(BlockCheckpointedNet(fake.generator, how, reentrant=reentrant))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning of braeburn's either
        # torch's own, for a reentrant checkpoint inside a reentrant forward (which runs under no_grad)
        warnings.filterwarnings("ignore", "None of the inputs have requires_grad=True")
        got = net_gradients(accelerator, model, fake.generator)
    for got, want in zip(got, expected):
        torch.testing.assert_close(got, want)
    assert torch.utils.checkpoint.checkpoint is checkpoint_bound_at_import  # nothing of torch's is left replaced
    assert torch.utils.checkpoint.CheckpointFunction.__name__ == "CheckpointFunction"
    assert torch.utils.checkpoint._checkpoint_without_reentrant_generator.__module__ == "torch.utils.checkpoint"
    accelerator.end_training()


@pytest.mark.parametrize("reentrant", [False, True])
def test_a_checkpoint_that_asks_for_no_random_state_preserved_is_left_as_asked(fake_mac, monkeypatch, reentrant):
    from braeburn import Accelerator

    fake = FakeMpsGenerator()
    fake.install(monkeypatch)
    accelerator = Accelerator()
    expected = net_gradients(accelerator, accelerator.prepare(BlockCheckpointedNet(fake.generator, "none")),
                             fake.generator)
    model = accelerator.prepare(BlockCheckpointedNet(fake.generator, "no-replay", reentrant=reentrant))
    got = net_gradients(accelerator, model, fake.generator)  # new masks in the recompute, as torch does when asked
    assert not all(torch.equal(g, w) for g, w in zip(got, expected))
    accelerator.end_training()


def noisy_gradients(model: torch.nn.Module, generator: torch.Generator) -> None:
    """Gradient noise drawn, as on MPS tensors, from the (fake) MPS generator during the backward, on purpose."""
    for parameter in model.parameters():
        parameter.register_hook(lambda grad: grad + 1e-3 * torch.randn(grad.shape, generator=generator))


@pytest.mark.parametrize("how", ["none", "bound"])
def test_a_backward_that_draws_random_numbers_on_purpose_trains_with_no_word(fake_mac, monkeypatch, how):
    # Gradient noise with no checkpointing at all (and with a checkpoint bound at import) used to stop the backward
    # with CheckpointReplayError: a false alarm that stopped a correct run.
    from braeburn import Accelerator

    fake = FakeMpsGenerator()
    fake.install(monkeypatch)
    accelerator = Accelerator()
    reference = BlockCheckpointedNet(fake.generator, "none")
    noisy_gradients(reference, fake.generator)
    expected = net_gradients(accelerator, accelerator.prepare(reference), fake.generator)
    model = BlockCheckpointedNet(fake.generator, how)
    noisy_gradients(model, fake.generator)
    model = accelerator.prepare(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = net_gradients(accelerator, model, fake.generator)
    for got, want in zip(got, expected):
        torch.testing.assert_close(got, want)  # the same noise, the same dropout masks
    accelerator.end_training()


def test_a_checkpoint_traced_into_a_compiled_forward_stops_the_backward_with_the_reason(fake_mac, monkeypatch):
    # torch.compile (aot_eager, inductor) traces checkpoint() into its graph: the recompute runs no Python of
    # braeburn's. Faked here by telling the replay that torch.compile is tracing while the eager forward runs: the
    # checkpoint is left unreplayed, as in a compiled graph, and the dropout draws new masks in the recompute.
    from braeburn import Accelerator
    from braeburn.accelerator import checkpoint_replay
    from braeburn.accelerator.checkpoint_replay import CheckpointReplayError

    fake = FakeMpsGenerator()
    fake.install(monkeypatch)
    accelerator = Accelerator()
    model = accelerator.prepare(BlockCheckpointedNet(fake.generator, "bound"))
    monkeypatch.setattr(checkpoint_replay, "_compiling", lambda: True)
    with pytest.raises(CheckpointReplayError, match=r"this backward drew random numbers on mps, and the model's "
                                                    r"compiled forward \(compile=True, or a model you compiled\) calls "
                                                    r"torch.utils.checkpoint.*braeburn stops before the optimizer "
                                                    r"applies them. Pass compile=False"):
        net_gradients(accelerator, model, fake.generator)
    # without dropout the recompute draws nothing, the gradients are right, and nothing is said
    quiet = accelerator.prepare(BlockCheckpointedNet(fake.generator, "bound", p=0.0))
    net_gradients(accelerator, quiet, fake.generator)
    accelerator.end_training()


@pytest.mark.filterwarnings("ignore:braeburn. torch.compile on MPS:UserWarning")  # its own test is above
def test_compile_true_with_a_checkpoint_in_the_forward_gives_the_plain_forwards_gradients(fake_mac, monkeypatch):
    # compile=True is refused before training only for checkpointing braeburn turns on or finds on the layers; a
    # checkpoint called in the forward that torch.compile runs eagerly (the eager backend; a graph break) is replayed
    # (it stopped the backward, telling the user to call checkpoint as they did)
    from braeburn import Accelerator

    fake = FakeMpsGenerator()
    fake.install(monkeypatch)
    reference = Accelerator()
    expected = net_gradients(reference, reference.prepare(BlockCheckpointedNet(fake.generator, "none")),
                             fake.generator)
    reference.end_training()
    accelerator = Accelerator(compile=True, compile_backend="eager")
    model = accelerator.prepare(BlockCheckpointedNet(fake.generator, "module"))
    try:
        got = net_gradients(accelerator, model, fake.generator)
        assert accelerator.compile_stats(model).compiled_calls == 1
    finally:
        accelerator.end_training()
    for got, want in zip(got, expected):
        torch.testing.assert_close(got, want)


def test_where_torch_dispatches_checkpoint_otherwise_a_moved_generator_is_warned_once_not_raised(fake_mac,
                                                                                                 monkeypatch):
    # A torch without CheckpointFunction and _checkpoint_without_reentrant_generator (faked: braeburn told it found
    # none): only checkpoint(...) looked up in the forward is replayed; a generator that moved in a backward may be an
    # unseen checkpoint or gradient noise on purpose, so braeburn warns once and trains on.
    from braeburn import Accelerator
    from braeburn.accelerator import checkpoint_replay
    from braeburn.warn import BraeburnWarning

    monkeypatch.setattr(checkpoint_replay, "dispatch_found", lambda: False)
    fake = FakeMpsGenerator()
    fake.install(monkeypatch)
    accelerator = Accelerator()
    expected = net_gradients(accelerator, accelerator.prepare(BlockCheckpointedNet(fake.generator, "none")),
                             fake.generator)
    looked_up = accelerator.prepare(BlockCheckpointedNet(fake.generator, "module"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for got, want in zip(net_gradients(accelerator, looked_up, fake.generator), expected):
            torch.testing.assert_close(got, want)
    bound = accelerator.prepare(BlockCheckpointedNet(fake.generator, "bound"))
    with pytest.warns(BraeburnWarning, match=r"the mps random state moved during a backward.*`from "
                                             r"torch.utils.checkpoint import checkpoint`.*gradient noise.*Said once"):
        net_gradients(accelerator, bound, fake.generator)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        net_gradients(accelerator, bound, fake.generator)  # said once
    accelerator.end_training()


@pytest.mark.filterwarnings("ignore:braeburn. torch.compile on MPS:UserWarning")  # its own test is above
def test_compile_with_checkpointing_on_a_mac_is_refused_before_training(fake_mac, monkeypatch, tmp_path):
    from torch.utils.data import TensorDataset

    from braeburn import Accelerator, Trainer, TrainingConfig

    fake = FakeMpsGenerator()
    fake.install(monkeypatch)
    data = TensorDataset(torch.randint(0, 64, (8, 16)))
    accelerator = Accelerator(compile=True)  # what compile="true" builds; handed in, so that it is ended below
    try:
        config = TrainingConfig(output_dir=str(tmp_path), max_steps=2, compile="true", gradient_checkpointing=True)
        with pytest.raises(ValueError, match=r"compile=True with gradient checkpointing \(gradient_checkpointing=True\) "
                                             r"on mps: .*BackendCompilerFailed.*Pass compile=False"):
            Trainer(tiny_gpt2(fake.generator), config, train_dataset=data, accelerator=accelerator)
        model = tiny_gpt2(fake.generator)
        enable_checkpointing(model)
        with pytest.raises(ValueError, match=r"turned on on GPT2LMHeadModel's own layers"):
            Trainer(model, TrainingConfig(output_dir=str(tmp_path), max_steps=2, compile="true"), train_dataset=data,
                    accelerator=accelerator)
        with pytest.raises(ValueError, match=r"turned on on GPT2LMHeadModel's own layers"):
            accelerator.prepare(model)
    finally:
        accelerator.end_training()




def test_compile_auto_stays_eager_where_checkpointing_needs_the_replay(fake_mac, monkeypatch):
    # No kind compiles by default and lacks the replay today (MPS compiles only when asked); were one to, "auto"
    # would stay eager with the reason rather than fail at the first compiled step.
    from braeburn import Accelerator

    monkeypatch.setattr(MpsDevice, "compile_by_default", lambda self, host: (True, "pretend MPS compiles"))
    model = tiny_gpt2(torch.Generator())
    enable_checkpointing(model)
    accelerator = Accelerator()
    assert accelerator.plan.compile and accelerator.plan.compile_auto
    model = accelerator.prepare(model)
    decision = accelerator.compile_decision(model)
    assert not decision.compile and "gradient checkpointing on mps replays its random state" in decision.reason
    accelerator.end_training()
