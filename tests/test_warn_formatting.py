"""braeburn's one-line warning format and another library's formatter wrapping each other (Lightning installs
one that calls the formatter it found; braeburn's then wrapped Lightning's): a warning is still formatted, never
an endless recursion (which pytest reported as an INTERNALERROR, ending the session)."""

from __future__ import annotations

import warnings

from braeburn import warn as warn_module


def test_formatters_wrapping_each_other_format_a_warning_without_recursion(monkeypatch):
    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)
    monkeypatch.setattr(warn_module._one_line, "previous", warnings.formatwarning)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warn_module.warn("first")  # braeburn's formatter goes in
    found = warnings.formatwarning

    def other_library(message, category, filename, lineno, line=None):  # as lightning_fabric's
        return found(message, category, filename, lineno, line)

    warnings.formatwarning = other_library
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warn_module.warn("second")  # braeburn's goes in again, over the other one that calls it
    text = warnings.formatwarning("plain", UserWarning, "x.py", 3)
    assert text.startswith("x.py:3: UserWarning: plain")
    assert warnings.formatwarning("ours", warn_module.BraeburnWarning, "x.py", 3) == "braeburn: ours\n"
