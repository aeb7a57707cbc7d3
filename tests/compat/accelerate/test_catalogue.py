"""Accelerate's idioms, one process: each written as Accelerate 1.15's docs and examples write it, run under
``accelerate.Accelerator`` and ``braeburn.Accelerator`` in the same test (CPU, one thread), compared by what a user
sees: the training step, and what is refused. Evaluation and collectives are in test_catalogue_collectives.py, the
state a process reads in test_catalogue_state.py, the process helpers in test_catalogue_helpers.py, checkpoints and
trackers in test_catalogue_files.py, the two-process idioms in test_catalogue_processes.py. See
tests/compat/catalogue.py for the outcomes."""

from __future__ import annotations

import pytest
import torch

from tests.compat.accelerate._peers import cpu_for_accelerate  # noqa: F401  (an autouse fixture)
from tests.compat.accelerate._peers import identical as _identical, loader, model, setup, step, weights
from tests.compat.catalogue import Catalogue, Observation, assert_refused

CATALOGUE = Catalogue("accelerate")
idiom = CATALOGUE.idiom


# -- the training step -------------------------------------------------------------------------------

@idiom("accelerator.prepare(model, optimizer, dataloader) + accelerator.backward(loss)", "identical",
       "bitwise losses per step and final weights")
def _prepare_and_backward(tmp_path):
    def script(lib, folder):
        accelerator, net, optimizer, data = setup(lib)
        losses = [step(accelerator, net, optimizer, batch) for _ in range(2) for batch in data]
        return Observation(losses=losses, extra={"weights": weights(net)})

    _identical(script, tmp_path)


@idiom("accelerator.prepare(..., scheduler) + scheduler.step() per batch", "identical",
       "bitwise losses and learning rates per step")
def _prepared_scheduler(tmp_path):
    def script(lib, folder):
        accelerator = lib.Accelerator()
        net = model()
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
        net, optimizer, data, scheduler = accelerator.prepare(net, optimizer, loader(), scheduler)
        losses, lrs = [], []
        for batch in data:
            losses.append(step(accelerator, net, optimizer, batch))
            scheduler.step()
            lrs.append(scheduler.get_last_lr()[0])
        return Observation(losses=losses, metrics={"lr": lrs})

    _identical(script, tmp_path)


def _scheduled(lib, make, *, epochs=2, per_epoch=False, metric=False, **accelerator_kwargs):
    accelerator = lib.Accelerator(**accelerator_kwargs)
    net = model()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    net, optimizer, data, scheduler = accelerator.prepare(net, optimizer, loader(n=12, batch_size=2), make(optimizer))
    losses, lrs = [], []
    for _ in range(epochs):
        for inputs, labels in data:
            with accelerator.accumulate(net):
                loss = torch.nn.functional.cross_entropy(net(inputs), labels)
                accelerator.backward(loss)
                optimizer.step()
                if not per_epoch:
                    scheduler.step()
                optimizer.zero_grad()
            losses.append(loss.item())
            lrs.append(optimizer.param_groups[0]["lr"])
        if per_epoch:
            scheduler.step(sum(losses[-6:])) if metric else scheduler.step()
    return Observation(losses=losses, metrics={"lr": lrs})


@idiom("a LambdaLR warm-up prepared with gradient_accumulation_steps=3, scheduler.step() inside accumulate()",
       "identical", "bitwise losses and learning rates per batch (the schedule moves at optimizer steps only)")
def _scheduler_with_accumulation(tmp_path):
    _identical(lambda lib, folder: _scheduled(
        lib, lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda s: min(1.0, (s + 1) / 4)),
        gradient_accumulation_steps=3), tmp_path)


@idiom("Accelerator(step_scheduler_with_optimizer=False) + StepLR stepped once per epoch", "identical",
       "bitwise losses and learning rates")
def _scheduler_per_epoch(tmp_path):
    _identical(lambda lib, folder: _scheduled(
        lib, lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5), epochs=3, per_epoch=True,
        step_scheduler_with_optimizer=False), tmp_path)


@idiom("ReduceLROnPlateau prepared, scheduler.step(metric) once per epoch", "identical",
       "bitwise losses and learning rates")
def _plateau(tmp_path):
    _identical(lambda lib, folder: _scheduled(
        lib, lambda o: torch.optim.lr_scheduler.ReduceLROnPlateau(o, patience=0, factor=0.5), epochs=3,
        per_epoch=True, metric=True), tmp_path)


def _accumulating(lib, folder, **accelerator_kwargs):
    accelerator, net, optimizer, data = setup(lib, data=loader(n=14, batch_size=2), **accelerator_kwargs)
    losses, syncs = [], []
    for _ in range(2):
        for inputs, labels in data:
            with accelerator.accumulate(net):
                loss = torch.nn.functional.cross_entropy(net(inputs), labels)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
            losses.append(loss.item())
            syncs.append(accelerator.sync_gradients)
    return Observation(losses=losses, calls=[str(s) for s in syncs], extra={"weights": weights(net)})


@idiom("Accelerator(gradient_accumulation_steps=2) + with accelerator.accumulate(model)", "identical",
       "bitwise losses, sync_gradients per batch (a partial window at the end of the epoch) and weights")
def _accumulate(tmp_path):
    _identical(lambda lib, folder: _accumulating(lib, folder, gradient_accumulation_steps=2), tmp_path)


@idiom("Accelerator(gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=3))", "identical",
       "bitwise losses, sync_gradients and weights")
def _accumulation_plugin(tmp_path):
    _identical(lambda lib, folder: _accumulating(
        lib, folder, gradient_accumulation_plugin=lib.GradientAccumulationPlugin(num_steps=3)), tmp_path)


def _clipping(lib, folder, clip):
    accelerator, net, optimizer, data = setup(lib, lr=1.0)
    losses, norms = [], []
    for inputs, labels in data:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(inputs), labels) * 10
        accelerator.backward(loss)
        if accelerator.sync_gradients:
            norms.append(clip(accelerator, net))
        optimizer.step()
        losses.append(loss.item())
    return Observation(losses=losses, metrics={"returned": norms}, extra={"weights": weights(net)})


@idiom("if accelerator.sync_gradients: accelerator.clip_grad_norm_(model.parameters(), 1.0)", "identical",
       "bitwise losses and the total norms returned")
def _clip_norm(tmp_path):
    _identical(lambda lib, folder: _clipping(
        lib, folder, lambda a, net: a.clip_grad_norm_(net.parameters(), 1.0).item()), tmp_path)


@idiom("accelerator.clip_grad_value_(model.parameters(), 0.05)", "identical", "bitwise losses and weights")
def _clip_value(tmp_path):
    _identical(lambda lib, folder: _clipping(
        lib, folder, lambda a, net: a.clip_grad_value_(net.parameters(), 0.05)), tmp_path)


@idiom("with accelerator.no_sync(model): backward; then a synced backward", "identical", "bitwise losses")
def _no_sync(tmp_path):
    def script(lib, folder):
        accelerator, net, optimizer, data = setup(lib)
        losses = []
        for index, (inputs, labels) in enumerate(data):
            loss = torch.nn.functional.cross_entropy(net(inputs), labels)
            if index % 2 == 0:
                with accelerator.no_sync(net):
                    accelerator.backward(loss)
            else:
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
            losses.append(loss.item())
        return Observation(losses=losses, extra={"weights": weights(net)})

    _identical(script, tmp_path)


@idiom("with accelerator.autocast(): (mixed_precision='no')", "identical", "bitwise outputs, float32")
def _autocast(tmp_path):
    def script(lib, folder):
        accelerator, net, optimizer, data = setup(lib)
        inputs, _ = next(iter(data))
        with accelerator.autocast():
            out = net(inputs)
        return Observation(metrics={"out": out.flatten().tolist()}, extra={"dtype": str(out.dtype)})

    _identical(script, tmp_path)


@idiom("Accelerator(mixed_precision='bf16') on the CPU", "identical",
       "bitwise losses: both autocast the forward to bfloat16 on the CPU")
def _bf16(tmp_path):
    def script(lib, folder):
        accelerator, net, optimizer, data = setup(lib, mixed_precision="bf16")
        losses = [step(accelerator, net, optimizer, batch) for batch in data]
        return Observation(losses=losses, extra={"mixed_precision": accelerator.mixed_precision})

    _identical(script, tmp_path)


@idiom("set_seed(42) (accelerate.utils) before building the model and two shuffled DataLoaders", "identical",
       "bitwise losses, the same shuffled orders, dropout's masks the same")
def _set_seed(tmp_path):
    from accelerate.utils import set_seed

    def script(lib, folder):
        set_seed(42)
        accelerator = lib.Accelerator()
        net = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 2))
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        net, optimizer, data, other = accelerator.prepare(net, optimizer, loader(shuffle=True),
                                                          loader(n=6, batch_size=3, shuffle=True))
        losses = [step(accelerator, net, optimizer, batch) for _ in range(2) for batch in data]
        return Observation(losses=losses, extra={"other": [b[0].tolist() for _ in range(2) for b in other]})

    _identical(script, tmp_path)


@idiom("Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)])", "identical",
       "bitwise losses (one process: no DDP wrapper on either side)")
def _ddp_kwargs(tmp_path):
    def script(lib, folder):
        handler = lib.DistributedDataParallelKwargs(find_unused_parameters=True)
        accelerator, net, optimizer, data = setup(lib, kwargs_handlers=[handler])
        return Observation(losses=[step(accelerator, net, optimizer, batch) for batch in data])

    _identical(script, tmp_path)


# -- refused: braeburn cannot do it, and says what to do instead ----------------------------------------------

def _refused(build, idiom_words, way_out_words):
    import braeburn

    from tests.compat.accelerate._peers import library, reset_accelerate

    reset_accelerate()
    peer = build(library("accelerate"))  # Accelerate takes it
    assert peer is not None
    with pytest.raises(Exception) as raised:
        build(library("braeburn"))
    assert_refused(raised.value, idiom_words, way_out_words)
    assert braeburn  # (the error came from braeburn's own code: assert_refused checks the frames)


@idiom("DataLoaderConfiguration(split_batches=True)", "refused",
       "divide batch_size by the number of processes yourself")
def _split_batches(tmp_path):
    _refused(lambda lib: lib.Accelerator(dataloader_config=lib.DataLoaderConfiguration(split_batches=True)),
             ["split_batches"], ["divide batch_size by the number of processes yourself"])


@idiom("DataLoaderConfiguration(dispatch_batches=True)", "refused", "remove it: every process reads its own share")
def _dispatch_batches(tmp_path):
    _refused(lambda lib: lib.Accelerator(dataloader_config=lib.DataLoaderConfiguration(dispatch_batches=True)),
             ["dispatch_batches"], ["Fix: remove it"])


@idiom("Accelerator(kwargs_handlers=[GradScalerKwargs(init_scale=1024)])", "refused",
       "remove it, or pass mixed_precision='bf16' (no scaler)")
def _grad_scaler_kwargs(tmp_path):
    from accelerate.utils import GradScalerKwargs

    _refused(lambda lib: lib.Accelerator(kwargs_handlers=[GradScalerKwargs(init_scale=1024)]),
             ["GradScalerKwargs.init_scale"], ["mixed_precision='bf16'"])


@idiom("Accelerator(dynamo_backend='aot_eager')", "refused", "dynamo_backend='inductor' or compile=True")
def _dynamo_backend(tmp_path):
    _refused(lambda lib: lib.Accelerator(dynamo_backend="aot_eager"), ["dynamo_backend"],
             ["dynamo_backend='inductor'"])


@idiom("with accelerator.autocast(autocast_handler=AutocastKwargs(enabled=False))", "refused",
       "call accelerator.autocast(), or wrap the code in torch.autocast(...) yourself")
def _autocast_handler(tmp_path):
    from accelerate.utils import AutocastKwargs

    _refused(lambda lib: lib.Accelerator().autocast(autocast_handler=AutocastKwargs(enabled=False)),
             ["autocast(autocast_handler="], ["wrap the code in torch.autocast(...) yourself"])

# (last: the parameters are the idioms registered above)
@pytest.mark.slow  # the one-process catalogue took 10 s as one file with two CPU burners (benchmarks/test_time.sh)
@pytest.mark.parametrize("case", CATALOGUE.params())
def test_idiom(case, tmp_path):
    case.run(tmp_path)
