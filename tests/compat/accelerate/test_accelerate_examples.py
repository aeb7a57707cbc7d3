"""Accelerate's examples, ported small (accelerate_ports.py), against Accelerate and braeburn: same observations."""

from __future__ import annotations

import importlib.util

import pytest

from . import accelerate_ports as ports


def test_nlp_example(acc_lib, tmp_path):
    observed = ports.nlp_example(acc_lib, tmp_path)
    assert observed["evaluated"] == 16 and observed["accuracy_type"] == "float" and observed["device"] == "cpu"
    assert observed["lr_after"] == 0.0  # the linear schedule reached its end


def test_cv_example_with_tracking_and_epoch_checkpoints(acc_lib, tmp_path):
    observed = ports.cv_example(acc_lib, tmp_path)
    assert observed["evaluated"] == 24 and 0.0 <= observed["accuracy"] <= 1.0
    assert observed["epoch_dirs"] == ["epoch_0", "epoch_1"]
    # TensorBoard is optional for both libraries: its events exist exactly when it is installed.
    assert observed["tensorboard_events"] == (importlib.util.find_spec("tensorboard") is not None)


@pytest.mark.slow  # 6 s with two CPU burners on 2 cores (benchmarks/test_time.sh)
def test_checkpointing_resume_matches_uninterrupted(acc_lib, tmp_path):
    assert ports.checkpointing(acc_lib, tmp_path) == {"resumed_equals_uninterrupted": True,
                                                      "checkpoint_written": True}


def test_tracking(acc_lib, tmp_path):
    pytest.importorskip("tensorboard", reason="Accelerate's tracking example logs to TensorBoard (optional)")
    assert ports.tracking(acc_lib, tmp_path) == {"tensorboard_events": True, "unwrapped_is_writer": True,
                                                 "wrapped_name": "tensorboard"}


_RESULTS: dict[str, dict] = {}


def test_gradient_accumulation_same_weights_as_accelerate(acc_lib, tmp_path):
    observed = ports.gradient_accumulation(acc_lib, tmp_path)
    assert observed["syncs"] == [False, True] * 3 and observed["lr"] == pytest.approx(0.1 / 4)  # 3 real steps
    _RESULTS[acc_lib.name] = observed
    if len(_RESULTS) == 2:  # both ran (Accelerate installed): the same numbers
        assert _RESULTS["accelerate"] == _RESULTS["braeburn"]


@pytest.mark.slow  # grows a batch until it fails, under both libraries (6-17 s)
def test_memory_find_executable_batch_size(acc_lib, tmp_path):
    observed = ports.memory(acc_lib, tmp_path)
    assert observed["tried"] == [128, 64, 32, 16] and observed["result"] == 32
    assert observed["zero_message"] == "No executable batch size found, reached zero."
    assert observed["default"] == [100, 90, 81, 72, 64, 64]  # 90% per retry, as Accelerate
