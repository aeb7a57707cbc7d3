"""The MPS CPU-fallback report (PyTorch's exact warning text) and the before-torch environment advice."""

from __future__ import annotations

import warnings

import pytest

from braeburn.devices.mps import FALLBACK_VAR, MpsDevice
from braeburn.devices.fallback import FallbackRecorder, early_env_advice, parse_fallback_warning
from tests.conftest import APPLE_M


def fallback_text(op: str) -> str:
    return (f"The operator '{op}' is not currently supported on the MPS backend and will fall back to run on "
            "the CPU. This may have performance implications.")


def test_parse_exact_text():
    assert parse_fallback_warning(fallback_text("aten::_linalg_svd.U")) == "aten::_linalg_svd.U"
    assert parse_fallback_warning("The operator 'aten::nonzero' is not currently implemented for the MPS device.") \
        is None
    assert parse_fallback_warning("some other warning") is None


def test_recorder_counts_and_passes_every_warning_on():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with FallbackRecorder() as recorder:
            warnings.warn(fallback_text("aten::angle"), UserWarning)
            warnings.warn(fallback_text("aten::angle"), UserWarning)
            warnings.warn(fallback_text("aten::cumprod.out"), UserWarning)
            warnings.warn("unrelated", DeprecationWarning)
        assert not recorder.active
        warnings.warn(fallback_text("aten::angle"), UserWarning)  # after stop: not counted
    assert recorder.report() == [("aten::angle", 2), ("aten::cumprod.out", 1)]
    assert len(caught) == 5  # nothing swallowed


def test_stop_keeps_a_later_hook_in_place():
    recorder = FallbackRecorder().start()
    later = FallbackRecorder().start()
    recorder.stop()  # stopped out of order: the later hook stays installed and still counts
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn(fallback_text("aten::angle"), UserWarning)
    later.stop()
    assert later.report() == [("aten::angle", 1)]


def test_accelerator_reports_fallbacks(monkeypatch):
    for name in ("BRAEBURN_DEVICE", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    from braeburn import Accelerator

    accelerator = Accelerator(cpu=True)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn(fallback_text("aten::upsample_bicubic2d.out"), UserWarning)
    assert accelerator.fallback_report() == [("aten::upsample_bicubic2d.out", 1)]
    accelerator.end_training()


MPS_ENV = MpsDevice().env_before_torch()


@pytest.mark.parametrize("torch_first, env_at_import, environ, advised", [
    (True, {}, {}, True),                        # torch loaded before braeburn, variable missing
    (True, {}, {FALLBACK_VAR: "1"}, True),       # set after torch loaded: too late, still advised
    (True, {FALLBACK_VAR: "0"}, {}, False),      # the user's own value wins, whatever it is
    (False, {}, {FALLBACK_VAR: "1"}, False),     # braeburn first and the variable set before torch
    (False, {}, {}, True),                       # nobody set it
])
def test_early_env_advice(torch_first, env_at_import, environ, advised):
    host = APPLE_M.replace(torch_loaded_before_braeburn=torch_first, env=env_at_import)
    advice = early_env_advice(MPS_ENV, host, environ)
    assert (advice is not None) == advised
    if advised:
        assert "braeburn launch script.py" in advice and f"export {FALLBACK_VAR}=1" in advice


def test_no_advice_for_kinds_that_need_nothing():
    assert early_env_advice({}, APPLE_M.replace(torch_loaded_before_braeburn=True), {}) is None
