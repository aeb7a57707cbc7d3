"""Accelerate's idioms, one process: each written as Accelerate 1.15's docs and examples write it, run under
``accelerate.Accelerator`` and ``braeburn.Accelerator`` in the same test (CPU, one thread), compared by what a user
sees. Checkpoints and trackers are in test_catalogue_files.py, the two-process idioms in
test_catalogue_processes.py. See tests/compat/catalogue.py for the outcomes."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, SequentialSampler

from tests.compat.accelerate._peers import cpu_for_accelerate  # noqa: F401  (an autouse fixture)
from tests.compat.accelerate._peers import both, identical as _identical, dataset, loader, model, setup, step, weights
from tests.compat.catalogue import Catalogue, Observation, assert_identical, assert_on_purpose, assert_refused

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


# -- evaluation and collectives on one process ---------------------------------------------------------

@idiom("accelerator.gather_for_metrics((predictions, labels)) over an eval loop with a short last batch",
       "identical", "the same predictions and labels, none repeated")
def _gather_for_metrics(tmp_path):
    def script(lib, folder):
        accelerator, net, optimizer, data = setup(lib)
        net.eval()
        predictions, references = [], []
        for inputs, labels in data:
            with torch.no_grad():
                guess = net(inputs).argmax(dim=-1)
            guess, labels = accelerator.gather_for_metrics((guess, labels))
            predictions += guess.tolist()
            references += labels.tolist()
        return Observation(metrics={"predictions": predictions, "references": references})

    _identical(script, tmp_path)


@idiom("accelerator.gather_for_metrics(['text', ...], use_gather_object=True)", "identical", "the same list")
def _gather_objects(tmp_path):
    def script(lib, folder):
        accelerator = lib.Accelerator()
        return Observation(extra={"gathered": accelerator.gather_for_metrics(["a", "b"], use_gather_object=True)})

    _identical(script, tmp_path)


@idiom("accelerator.gather(tensor), accelerator.reduce(tensor, 'sum'/'mean')", "identical", "the same values")
def _gather_reduce(tmp_path):
    def script(lib, folder):
        accelerator = lib.Accelerator()
        value = torch.tensor([1.0, 2.0, 4.0])
        return Observation(metrics={"gather": accelerator.gather(value).tolist(),
                                    "sum": accelerator.reduce(value, "sum").tolist(),
                                    "mean": accelerator.reduce(value, "mean").tolist()})

    _identical(script, tmp_path)


@idiom("accelerator.pad_across_processes(tensor, dim=1, pad_index=-100)", "identical", "the same tensor")
def _pad(tmp_path):
    def script(lib, folder):
        accelerator = lib.Accelerator()
        return Observation(metrics={"padded": accelerator.pad_across_processes(
            torch.arange(6).view(2, 3), dim=1, pad_index=-100).tolist()})

    _identical(script, tmp_path)


@idiom("accelerator.unwrap_model(model) / unwrap_model(model, keep_fp32_wrapper=False)", "identical",
       "the user's module, its state dict's keys and values")
def _unwrap(tmp_path):
    def script(lib, folder):
        accelerator, net, optimizer, data = setup(lib)
        assert accelerator.unwrap_model(net, keep_fp32_wrapper=False) is accelerator.unwrap_model(net)
        inner = accelerator.unwrap_model(net)
        return Observation(extra={"type": type(inner).__name__, "keys": list(inner.state_dict()),
                                  "weights": weights(inner)})

    _identical(script, tmp_path)


@idiom("Accelerate's keywords: prepare(model, optimizer, device_placement=[True, True]), reduce(t, 'mean', "
       "scale=2.0), autocast(autocast_handler=AutocastKwargs())", "identical", "the same values")
def _keywords(tmp_path):
    from accelerate.utils import AutocastKwargs

    def script(lib, folder):
        accelerator = lib.Accelerator()
        net, optimizer = accelerator.prepare(model(), torch.optim.SGD(model().parameters(), lr=0.1),
                                             device_placement=[True, True])
        reduced = accelerator.reduce(torch.tensor([1.0, 3.0]), "mean", scale=2.0)
        with accelerator.autocast(autocast_handler=AutocastKwargs()):
            out = net(torch.ones(1, 3))
        return Observation(extra={"reduced": reduced.tolist(), "out": out.tolist()})

    _identical(script, tmp_path)


@idiom("with accelerator.autocast(autocast_handler=AutocastKwargs(enabled=False))", "refused",
       "call accelerator.autocast(), or wrap the code in torch.autocast(...) yourself")
def _autocast_handler(tmp_path):
    from accelerate.utils import AutocastKwargs

    _refused(lambda lib: lib.Accelerator().autocast(autocast_handler=AutocastKwargs(enabled=False)),
             ["autocast(autocast_handler="], ["wrap the code in torch.autocast(...) yourself"])


@idiom("accelerator.get_state_dict(model)", "identical", "the same keys and tensors")
def _get_state_dict(tmp_path):
    def script(lib, folder):
        accelerator, net, optimizer, data = setup(lib)
        state = accelerator.get_state_dict(net)
        return Observation(extra={k: v.tolist() for k, v in state.items()})

    _identical(script, tmp_path)


# -- who am I ---------------------------------------------------------------------------------------------

@idiom("accelerator.is_main_process / is_local_main_process / process_index / local_process_index / "
       "num_processes / is_last_process / use_distributed / distributed_type / split_batches / even_batches / "
       "use_seedable_sampler / use_stateful_dataloader", "identical", "the same values")
def _who_am_i(tmp_path):
    def script(lib, folder):
        a = lib.Accelerator()
        return Observation(extra={"values": [a.is_main_process, a.is_local_main_process, a.process_index,
                                             a.local_process_index, a.num_processes, a.is_last_process,
                                             a.use_distributed, str(a.distributed_type), a.split_batches,
                                             a.even_batches, a.use_seedable_sampler, a.use_stateful_dataloader]})

    _identical(script, tmp_path)


@idiom("accelerator.device / accelerator.mixed_precision", "identical", "cpu and 'no'")
def _device_and_precision(tmp_path):
    def script(lib, folder):
        a = lib.Accelerator()
        return Observation(extra={"device": str(a.device), "mixed_precision": a.mixed_precision})

    _identical(script, tmp_path)


@idiom("accelerator.state.distributed_type / num_processes / process_index / device / mixed_precision / ...",
       "identical", "the same values and repr")
def _state(tmp_path):
    def script(lib, folder):
        state = lib.Accelerator().state
        names = ("distributed_type", "num_processes", "process_index", "local_process_index", "device",
                 "mixed_precision", "is_main_process", "is_local_main_process", "is_last_process",
                 "use_distributed", "backend", "deepspeed_plugin", "initialized", "debug")
        return Observation(extra={**{n: str(getattr(state, n)) for n in names}, "repr": repr(state)})

    _identical(script, tmp_path)


@idiom("accelerator.gradient_state.sync_gradients / end_of_dataloader / remainder / num_steps / in_dataloader "
       "read in an accumulate() loop with an eval loop inside", "identical",
       "the same values at every batch, inside the eval loop, after it and after the training loop")
def _gradient_state(tmp_path):
    def script(lib, folder):
        accelerator, net, optimizer, data = setup(lib, gradient_accumulation_steps=2)
        evaluation = accelerator.prepare(loader(n=3, batch_size=2))
        gs, seen = accelerator.gradient_state, []
        for inputs, labels in data:
            with accelerator.accumulate(net):
                accelerator.backward(torch.nn.functional.cross_entropy(net(inputs), labels))
                optimizer.step()
                optimizer.zero_grad()
            seen.append([gs.sync_gradients, gs.end_of_dataloader, gs.remainder, gs.num_steps, gs.in_dataloader])
            for _ in evaluation:  # an eval loop inside the training loop: the state is the training loader's after it
                seen.append(["eval", gs.end_of_dataloader, gs.remainder, gs.in_dataloader])
            seen.append(["after eval", gs.end_of_dataloader, gs.remainder, gs.in_dataloader])
        seen.append([gs.sync_gradients, gs.end_of_dataloader, gs.remainder, gs.num_steps, gs.in_dataloader,
                     gs.adjust_scheduler, gs.sync_with_dataloader, repr(gs)])
        return Observation(extra={"seen": seen})

    _identical(script, tmp_path)


class _Stream(IterableDataset):
    def __iter__(self):
        return iter(torch.arange(10.0).view(10, 1))


@idiom("prepared_loader.batch_size / total_batch_size / len(prepared_loader) / total_dataset_length, for a "
       "plain, shuffled, drop_last, batch_sampler and IterableDataset loader", "identical",
       "batch_size None for map-style loaders (their batch sampler batches), the DataLoader's for an IterableDataset")
def _loader_attributes(tmp_path):
    def script(lib, folder):
        accelerator = lib.Accelerator()
        data = dataset()
        loaders = {"plain": DataLoader(data, batch_size=4), "shuffled": DataLoader(data, batch_size=4, shuffle=True),
                   "drop_last": DataLoader(data, batch_size=4, drop_last=True),
                   "batch_sampler": DataLoader(data, batch_sampler=BatchSampler(SequentialSampler(data), 3, False))}
        seen = {}
        for name, raw in loaders.items():
            prepared = accelerator.prepare(raw)
            seen[name] = [prepared.batch_size, prepared.total_batch_size, len(prepared),
                          prepared.total_dataset_length, prepared.drop_last]
        stream = accelerator.prepare(DataLoader(_Stream(), batch_size=4))
        seen["iterable"] = [stream.batch_size, [b.tolist() for b in stream]]
        return Observation(extra=seen)

    _identical(script, tmp_path)


@idiom("DataLoaderConfiguration(use_seedable_sampler=True) + accelerator.use_seedable_sampler / even_batches / "
       "split_batches", "identical", "the same flags and the same shuffled order")
def _dataloader_configuration(tmp_path):
    def script(lib, folder):
        config = lib.DataLoaderConfiguration(use_seedable_sampler=True)
        accelerator, net, optimizer, data = setup(lib, data=loader(shuffle=True), dataloader_config=config)
        order = [batch[0].tolist() for _ in range(2) for batch in data]
        return Observation(extra={"flags": [accelerator.use_seedable_sampler, accelerator.even_batches,
                                            accelerator.split_batches], "order": order})

    _identical(script, tmp_path)


def _generator_orders(lib, generator):
    accelerator = lib.Accelerator()
    data = dataset(n=12)
    prepared = accelerator.prepare(DataLoader(data, batch_size=4, shuffle=True, generator=generator),
                                   DataLoader(data, batch_size=5, sampler=torch.utils.data.RandomSampler(
                                       data, generator=torch.Generator().manual_seed(5))))
    return Observation(extra={"orders": [[b[0].tolist() for _ in range(2) for b in loader] for loader in prepared],
                              "next random": torch.rand(2).tolist()})


@idiom("DataLoader(shuffle=True, generator=torch.Generator().manual_seed(123)) / sampler=RandomSampler(data, "
       "generator=...) prepared", "identical", "the same shuffled order every epoch (the generator's, from its seed), "
       "the same random numbers after")
def _users_generator(tmp_path):
    _identical(lambda lib, folder: _generator_orders(lib, torch.Generator().manual_seed(123)), tmp_path)


@idiom("DataLoader(shuffle=True, generator=g) where g was drawn from after g.manual_seed(...)", "on purpose",
       "one line: the order follows the generator from its seed, where Accelerate's continues from where it stands")
def _users_drawn_generator(tmp_path):
    def script(lib, folder):
        generator = torch.Generator().manual_seed(123)
        torch.rand(1, generator=generator)
        return _generator_orders(lib, generator)

    peer, ours, said = both(script, tmp_path)
    assert_on_purpose(said, "drawn from after it was seeded")
    assert peer.extra["orders"][0] != ours.extra["orders"][0]
    assert_identical(Observation(extra={"rest": peer.extra["orders"][1:]}),
                     Observation(extra={"rest": ours.extra["orders"][1:]}))


# -- the process helpers on one process ----------------------------------------------------------------

@idiom("with accelerator.main_process_first(): / local_main_process_first()", "identical", "the blocks run")
def _main_process_first(tmp_path):
    def script(lib, folder):
        accelerator, ran = lib.Accelerator(), []
        with accelerator.main_process_first():
            ran.append("main")
        with accelerator.local_main_process_first():
            ran.append("local")
        accelerator.wait_for_everyone()
        return Observation(calls=ran)

    _identical(script, tmp_path)


@idiom("@accelerator.on_main_process / on_local_main_process / on_last_process / on_process(process_index=1)",
       "identical", "the same functions run, the same values returned")
def _decorators(tmp_path):
    def script(lib, folder):
        a = lib.Accelerator()
        functions = [a.on_main_process(lambda: "main"), a.on_local_main_process(lambda: "local"),
                     a.on_last_process(lambda: "last"), a.on_process(lambda: "one", process_index=1)]
        return Observation(calls=[str(f()) for f in functions])

    _identical(script, tmp_path)


@idiom("accelerator.print(...)", "identical", "printed once, the same text")
def _print(tmp_path):
    import contextlib
    import io

    def script(lib, folder):
        accelerator, out = lib.Accelerator(), io.StringIO()
        with contextlib.redirect_stdout(out):
            accelerator.print("epoch", 1, {"loss": 0.5})
        return Observation(calls=out.getvalue().splitlines())

    _identical(script, tmp_path)


@idiom("with accelerator.split_between_processes(['a', 'b', 'c'], apply_padding=True) as share", "identical",
       "one process: the whole input")
def _split_one_process(tmp_path):
    def script(lib, folder):
        accelerator = lib.Accelerator()
        with accelerator.split_between_processes(["a", "b", "c"], apply_padding=True) as share:
            shares = [list(share)]
        with accelerator.split_between_processes({"x": [1, 2], "y": [3, 4]}) as share:
            shares.append(share)
        return Observation(extra={"shares": shares})

    _identical(script, tmp_path)


@idiom("accelerator.set_trigger() / accelerator.check_trigger()", "identical", "True once, then False")
def _trigger(tmp_path):
    def script(lib, folder):
        accelerator = lib.Accelerator()
        first = accelerator.check_trigger()
        accelerator.set_trigger()
        return Observation(calls=[str(first), str(accelerator.check_trigger()), str(accelerator.check_trigger())])

    _identical(script, tmp_path)


@idiom("accelerator.free_memory() / accelerator.optimizer_step_was_skipped", "identical", "the same values")
def _free_memory(tmp_path):
    def script(lib, folder):
        accelerator, net, optimizer, data = setup(lib)
        step(accelerator, net, optimizer, next(iter(data)))
        skipped = accelerator.optimizer_step_was_skipped
        return Observation(extra={"skipped": skipped, "freed": accelerator.free_memory()})

    _identical(script, tmp_path)


@idiom("skip_first_batches(prepared_loader, 2) and accelerator.skip_first_batches(...), plain and shuffled",
       "identical", "the same batches: the rest of an epoch (a new order for a shuffled one), then full epochs; "
       "the same random numbers after")
def _skip_first_batches(tmp_path):
    def script(lib, folder):
        accelerator = lib.Accelerator()
        seen = []
        for data in accelerator.prepare(loader(n=12, batch_size=2), loader(n=12, batch_size=2, shuffle=True)):
            seen += [[b[0].tolist() for b in lib.skip_first_batches(data, 2)],
                     [b[0].tolist() for b in accelerator.skip_first_batches(data, 4)], [b[0].tolist() for b in data]]
        return Observation(extra={"seen": seen, "next random": torch.rand(2).tolist()})

    _identical(script, tmp_path)


@idiom("@find_executable_batch_size(starting_batch_size=64) around the training function", "identical",
       "the same sizes tried after each out-of-memory error")
def _find_executable_batch_size(tmp_path):
    def script(lib, folder):
        tried = []

        @lib.find_executable_batch_size(starting_batch_size=64)
        def train(batch_size):
            tried.append(batch_size)
            if batch_size > 40:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            return batch_size

        return Observation(extra={"returned": train(), "tried": tried})

    _identical(script, tmp_path)


@idiom("@find_executable_batch_size around a function raising errors that only look like out-of-memory "
       "(CUDA error: out of memory, MemoryError, a two-argument RuntimeError) or that Accelerate retries (cuDNN "
       "not supported, the CPU allocator's, MPS's)", "identical",
       "the same errors retried at a smaller size, the others raised at once")
def _find_executable_batch_size_errors(tmp_path):
    errors = [RuntimeError("CUDA error: out of memory"), MemoryError(), RuntimeError("CUDA out of memory.", "two"),
              ValueError("CUDA out of memory."), RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error"),
              RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes"),
              RuntimeError("MPS backend out of memory (MPS allocated: 1 GB)"),
              torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")]

    def script(lib, folder):
        seen = []
        for error in errors:
            tried = []

            @lib.find_executable_batch_size(starting_batch_size=64)
            def train(batch_size):
                tried.append(batch_size)
                if batch_size > 40:
                    raise error
                return batch_size

            try:
                seen.append([train(), tried])
            except Exception as raised:  # noqa: BLE001 - what escaped is the observation
                seen.append([type(raised).__name__, str(raised), tried])
        return Observation(extra={"seen": seen})

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


# (last: the parameters are the idioms registered above)
@pytest.mark.slow  # 10 s with two CPU burners on 2 cores (benchmarks/test_time.sh)
@pytest.mark.parametrize("case", CATALOGUE.params())
def test_idiom(case, tmp_path):
    case.run(tmp_path)
