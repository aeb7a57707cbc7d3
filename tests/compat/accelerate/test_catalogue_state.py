"""Accelerate's idioms that read where a process stands, on one process (is_main_process, the state and the gradient
state, a prepared loader's attributes, the data order a DataLoaderConfiguration or a user's generator gives): each
run under ``accelerate.Accelerator`` and ``braeburn.Accelerator`` in the same test (CPU, one thread). See
tests/compat/catalogue.py for the outcomes."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, SequentialSampler

from tests.compat.accelerate._peers import cpu_for_accelerate  # noqa: F401  (an autouse fixture)
from tests.compat.accelerate._peers import both, identical as _identical, dataset, loader, setup
from tests.compat.catalogue import Catalogue, Observation, assert_identical, assert_on_purpose

CATALOGUE = Catalogue("accelerate")
idiom = CATALOGUE.idiom


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


# (last: the parameters are the idioms registered above)
@pytest.mark.slow  # the one-process catalogue took 10 s as one file with two CPU burners (benchmarks/test_time.sh)
@pytest.mark.parametrize("case", CATALOGUE.params())
def test_idiom(case, tmp_path):
    case.run(tmp_path)
