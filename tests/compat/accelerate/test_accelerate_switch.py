"""The crashes and refusals that blocked an Accelerate script's switch: what the script compares
against (``DistributedType.XLA``) and what it passes at harmless values (``DataLoaderConfiguration()``, kwargs
handlers, a tracker of its own) work under braeburn as under Accelerate; what braeburn cannot honour is refused
as such, not as something "this machine" cannot do."""

from __future__ import annotations

import datetime
import importlib.util
import re
import textwrap

import pytest
import torch

from tests.compat._two_processes import run_two_processes


# -- DistributedType -----------------------------------------------------------------------------------

def test_distributed_type_has_every_value_of_accelerates():
    accelerate = pytest.importorskip("accelerate")
    import braeburn

    assert {m.value for m in accelerate.DistributedType} <= {m.value for m in braeburn.DistributedType}
    for member in accelerate.DistributedType:  # str enums: each compares equal to Accelerate's own member
        assert braeburn.DistributedType[member.name] == member


def test_xla_can_be_compared_against_and_is_never_the_type(acc_lib):
    accelerator = acc_lib.Accelerator(cpu=True)
    assert accelerator.distributed_type != acc_lib.DistributedType.XLA
    assert accelerator.distributed_type == acc_lib.DistributedType.NO
    assert acc_lib.DistributedType.MEGATRON_LM != acc_lib.DistributedType.XLA


# -- harmless defaults, and DDP kwargs mapped onto DistributedDataParallel --------------------------------

def test_default_dataloader_config_and_kwargs_handlers_are_accepted(acc_lib):
    accelerator = acc_lib.Accelerator(cpu=True, dataloader_config=acc_lib.DataLoaderConfiguration(),
                                      kwargs_handlers=[acc_lib.DistributedDataParallelKwargs()])
    loader = torch.utils.data.DataLoader(torch.arange(8.0), batch_size=4)
    assert [batch.tolist() for batch in accelerator.prepare(loader)] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_accelerates_own_handler_objects_are_read_by_their_fields():
    """A script that kept `from accelerate.utils import ...` passes Accelerate's objects to braeburn."""
    utils = pytest.importorskip("accelerate.utils")
    import braeburn

    accelerator = braeburn.Accelerator(
        cpu=True, dataloader_config=utils.DataLoaderConfiguration(use_seedable_sampler=True, non_blocking=True),
        kwargs_handlers=[utils.DistributedDataParallelKwargs(find_unused_parameters=True, bucket_cap_mb=50),
                         utils.GradScalerKwargs(), utils.AutocastKwargs(), utils.ProfileKwargs(),
                         utils.InitProcessGroupKwargs(timeout=datetime.timedelta(seconds=90))])
    assert accelerator._ddp_options == {"find_unused_parameters": True, "bucket_cap_mb": 50}


def test_what_braeburn_cannot_honour_is_refused_as_such_all_at_once():
    import braeburn
    from braeburn.compat.accelerate.options import NotSupportedError

    with pytest.raises(NotSupportedError) as caught:
        braeburn.Accelerator(cpu=True,
                             dataloader_config=braeburn.DataLoaderConfiguration(even_batches=False, dispatch_batches=True),
                             kwargs_handlers=[braeburn.DistributedDataParallelKwargs(comm_hook="fp16"),
                                              braeburn.DistributedDataParallelKwargs()])
    message = str(caught.value)
    assert "cannot work on this machine" not in message and "braeburn does not support" in message
    assert "DataLoaderConfiguration.even_batches=False" in message and "Fix: leave it True" in message
    assert "DataLoaderConfiguration.dispatch_batches=True" in message
    assert "DistributedDataParallelKwargs.comm_hook='fp16'" in message and "register_comm_hook" in message
    assert "kwargs_handlers='DistributedDataParallelKwargs': is given twice" in message


@pytest.mark.parametrize("dynamo, compile, expected", [
    ("inductor", "regional", (True, True, False)),  # regional compilation with inductor (Accelerate's
    ("INDUCTOR", "Regional", (True, True, False)),  # use_regional_compilation): by regions, not whole
    ("inductor", "auto", (True, False, False)),
    ("no", "auto", (False, False, False)),  # Accelerate's no backend: not compiled, not braeburn's auto
    ("no", False, (False, False, False)),
])
def test_dynamo_backend_beside_compile_keeps_regional_compilation(dynamo, compile, expected):
    import braeburn

    plan = braeburn.Accelerator(cpu=True, dynamo_backend=dynamo, compile=compile).plan
    assert (plan.compile, plan.compile_regional, plan.compile_auto) == expected


@pytest.mark.parametrize("env, kwargs, expected", [
    # what `accelerate launch --dynamo_backend inductor --dynamo_use_regional_compilation` sets: by regions
    ({"ACCELERATE_DYNAMO_BACKEND": "INDUCTOR", "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION": "True"}, {}, "regional"),
    # a backend given in code: Accelerate's TorchDynamoPlugin still reads the launcher's regional compilation
    ({"ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION": "yes"}, {"dynamo_backend": "inductor"}, "regional"),
    ({"ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION": "1"}, {"dynamo_backend": "INDUCTOR"}, "regional"),
    ({"ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION": "TRUE"}, {"dynamo_backend": "no"}, "off"),
    ({"ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION": "False"}, {"dynamo_backend": "inductor"}, "whole"),
])
def test_the_launchers_regional_compilation_compiles_by_regions_as_in_accelerate(monkeypatch, no_launcher_env, env,
                                                                                 kwargs, expected):
    import braeburn

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    plan = braeburn.Accelerator(cpu=True, **kwargs).plan
    assert {(True, True): "regional", (True, False): "whole"}.get((plan.compile, plan.compile_regional), "off") == \
        expected
    if importlib.util.find_spec("accelerate") is not None:  # the same variables, read by Accelerate's own plugin
        from accelerate.utils import TorchDynamoPlugin

        plugin = TorchDynamoPlugin(backend=kwargs.get("dynamo_backend"))
        theirs = "off" if plugin.backend.value == "NO" else "regional" if plugin.use_regional_compilation else "whole"
        assert theirs == expected


def test_braeburn_compile_variable_wins_over_accelerates_dynamo_variables(monkeypatch, no_launcher_env):
    """`braeburn launch --compile false` (BRAEBURN_COMPILE) beside an exported ACCELERATE_DYNAMO_BACKEND: braeburn's
    own variable wins, as docs/migrating.md says; `--compile regional` reaches
    Accelerator(dynamo_backend='inductor')."""
    import braeburn

    monkeypatch.setenv("ACCELERATE_DYNAMO_BACKEND", "INDUCTOR")
    monkeypatch.setenv("BRAEBURN_COMPILE", "false")
    assert braeburn.Accelerator(cpu=True).plan.compile is False
    monkeypatch.delenv("ACCELERATE_DYNAMO_BACKEND")
    monkeypatch.setenv("BRAEBURN_COMPILE", "regional")
    plan = braeburn.Accelerator(cpu=True, dynamo_backend="inductor").plan
    assert (plan.compile, plan.compile_regional) == (True, True)
    plan = braeburn.Accelerator(cpu=True, dynamo_backend="inductor", compile=True).plan  # asked whole in code
    assert (plan.compile, plan.compile_regional) == (True, False)


def test_a_regional_compilation_variable_that_is_not_a_truth_value_is_said(monkeypatch, no_launcher_env):
    import braeburn

    monkeypatch.setenv("ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION", "maybe")
    with pytest.warns(UserWarning, match=r"ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION=maybe is not true or false "
                                         r"and is ignored .*set it to True or False"):
        braeburn.Accelerator(cpu=True, dynamo_backend="inductor")


def test_dynamo_backend_and_compile_that_disagree_are_refused_all_at_once():
    import braeburn
    from braeburn.compat.accelerate.options import NotSupportedError

    for dynamo, compile, words in (("no", "regional", "says compile=False, but compile='regional' was passed"),
                                   ("no", True, "says compile=False, but compile=True was passed"),
                                   ("inductor", False, "says compiling (compile=True, or 'regional' by regions), "
                                                       "but compile=False was passed")):
        with pytest.raises(NotSupportedError, match=re.escape(f"dynamo_backend={dynamo!r}: {words}")):
            braeburn.Accelerator(cpu=True, dynamo_backend=dynamo, compile=compile)


def test_a_data_seed_orders_the_data_as_the_seed_says(acc_lib):
    def order(seed):
        accelerator = acc_lib.Accelerator(cpu=True, dataloader_config=acc_lib.DataLoaderConfiguration(
            use_seedable_sampler=True, data_seed=seed))
        loader = torch.utils.data.DataLoader(torch.arange(16), batch_size=16, shuffle=True)
        return next(iter(accelerator.prepare(loader))).tolist()

    torch.manual_seed(1)
    first = order(7)
    torch.manual_seed(2)  # the global seed does not move the data order: data_seed decides it
    assert order(7) == first and sorted(first) == list(range(16))


UNUSED_PARAMETER = textwrap.dedent('''
    import importlib, json, sys

    import torch

    lib = importlib.import_module(sys.argv[1])
    out = sys.argv[2]


    class TwoHeads(torch.nn.Module):  # the second head gets no gradient: DDP fails without find_unused_parameters
        def __init__(self):
            super().__init__()
            self.used, self.unused = torch.nn.Linear(3, 1), torch.nn.Linear(3, 1)

        def forward(self, x):
            return self.used(x)


    accelerator = lib.Accelerator(cpu=True, dataloader_config=lib.DataLoaderConfiguration(),
                                  kwargs_handlers=[lib.DistributedDataParallelKwargs(find_unused_parameters=True,
                                                                                    broadcast_buffers=False)])
    torch.manual_seed(0)
    model = TwoHeads()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    for step in range(3):
        x = torch.full((2, 3), float(accelerator.process_index + step))
        accelerator.backward(model(x).pow(2).mean())
        optimizer.step()
        optimizer.zero_grad()
    weights = accelerator.unwrap_model(model).used.weight.detach().flatten().tolist()
    with open(f"{out}.{accelerator.process_index}.json", "w") as handle:
        json.dump({"find_unused_parameters": model.find_unused_parameters,
                   "sync_buffers": getattr(model, "forward_sync_buffers", getattr(model, "broadcast_buffers", None)),
                   "weights": [round(w, 6) for w in weights]}, handle)
    accelerator.end_training()
''')

_DDP_RESULTS: dict[str, list[dict]] = {}


@pytest.mark.slow
@pytest.mark.parametrize("lib", ["accelerate", "braeburn"])
def test_ddp_kwargs_find_unused_parameters_on_two_processes(lib, tmp_path):
    if importlib.util.find_spec(lib) is None:
        pytest.skip(f"{lib} is not installed")
    ranks = run_two_processes(UNUSED_PARAMETER, "unused.py", lib, tmp_path)
    assert [(rank["find_unused_parameters"], rank["sync_buffers"]) for rank in ranks] == [(True, False)] * 2
    assert ranks[0]["weights"] == ranks[1]["weights"]
    _DDP_RESULTS[lib] = ranks
    if len(_DDP_RESULTS) == 2:  # both ran: the same weights
        assert _DDP_RESULTS["accelerate"] == _DDP_RESULTS["braeburn"]


# -- a tracker of the script's own -------------------------------------------------------------------------

def _recording_tracker(calls: list):
    """A user's tracker, written as Accelerate's docs show: a subclass of accelerate.tracking.GeneralTracker."""
    tracking = pytest.importorskip("accelerate.tracking")

    class Recorder(tracking.GeneralTracker):
        name = "recorder"
        requires_logging_directory = False

        def __init__(self):
            super().__init__()

        @property
        def tracker(self):
            return calls

        def start(self):
            calls.append(("start",))

        def store_init_configuration(self, values):
            calls.append(("config", dict(values)))

        def log(self, values, step=None, **kwargs):
            calls.append(("log", dict(values), step, kwargs))

        def finish(self):
            calls.append(("finish",))

    return Recorder()


def test_a_custom_accelerate_tracker_is_called(acc_lib):
    calls: list = []
    accelerator = acc_lib.Accelerator(cpu=True, log_with=[_recording_tracker(calls)])
    accelerator.init_trackers("run", config={"lr": 0.1})
    accelerator.log({"loss": 0.5}, step=3, log_kwargs={"recorder": {"commit": True}})
    assert accelerator.get_tracker("recorder", unwrap=True) is calls
    accelerator.end_training()
    assert calls == [("start",), ("config", {"lr": 0.1}), ("log", {"loss": 0.5}, 3, {"commit": True}), ("finish",)]
