"""Accelerate's process helpers on one process (main_process_first, the on_*_process decorators, print,
split_between_processes, triggers, free_memory, skip_first_batches, find_executable_batch_size): each run under
``accelerate.Accelerator`` and ``braeburn.Accelerator`` in the same test (CPU, one thread). See
tests/compat/catalogue.py for the outcomes."""

from __future__ import annotations

import pytest
import torch

from tests.compat.accelerate._peers import cpu_for_accelerate  # noqa: F401  (an autouse fixture)
from tests.compat.accelerate._peers import identical as _identical, loader, setup, step
from tests.compat.catalogue import Catalogue, Observation

CATALOGUE = Catalogue("accelerate")
idiom = CATALOGUE.idiom


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


# (last: the parameters are the idioms registered above)
@pytest.mark.slow  # the one-process catalogue took 10 s as one file with two CPU burners (benchmarks/test_time.sh)
@pytest.mark.parametrize("case", CATALOGUE.params())
def test_idiom(case, tmp_path):
    case.run(tmp_path)
