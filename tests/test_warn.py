"""braeburn's warnings (braeburn.warn): one line for braeburn's own, and every other warning formatted as before."""

from __future__ import annotations

import warnings

from braeburn import warn as warn_module


def test_a_formatter_that_kept_braeburns_as_its_default_formats_without_looping(monkeypatch):
    """Lightning (lightning_fabric) replaces warnings.formatwarning on import and keeps the one it found as its
    default. Imported after braeburn's first warning, it keeps braeburn's; braeburn's next warning put its own back
    in front, deferring to Lightning's: every other warning then went round the two until RecursionError (in a
    test run, pytest's INTERNALERROR)."""
    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)  # restored after the test
    monkeypatch.setattr(warn_module._one_line, "previous", warn_module._one_line.previous)
    with warnings.catch_warnings(record=True):
        warn_module.warn("first")  # installs braeburn's formatter
    kept = warnings.formatwarning

    def lightnings(message, category, filename, lineno, line=None):
        return "lightning: " + kept(message, category, filename, lineno, line)

    warnings.formatwarning = lightnings  # what importing lightning_fabric does
    with warnings.catch_warnings(record=True):
        warn_module.warn("second")  # braeburn's goes in front again
    assert warnings.formatwarning is warn_module._one_line
    plain = warnings.formatwarning("plain", UserWarning, "script.py", 3, "")
    assert plain == "lightning: script.py:3: UserWarning: plain\n"
    own = warnings.formatwarning("the scheduler steps per epoch", warn_module.BraeburnWarning, "x.py", 1)
    assert own == "braeburn: the scheduler steps per epoch\n"
