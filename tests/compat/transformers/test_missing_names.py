"""Every public name of ``transformers.Trainer`` that ``braeburn.Trainer`` lacks is refused in one line naming it and
the way out (not a bare AttributeError); the list is checked against the installed Transformers."""

from __future__ import annotations

import pytest

from braeburn.compat.transformers.not_here import MISSING_CALLBACKS, MISSING_ON_TRAINER, SINCE, NotInBraeburn

from . import _runs


@pytest.fixture
def trainers(tmp_path, monkeypatch, no_launcher_env, one_thread):
    pytest.importorskip("transformers")
    monkeypatch.setenv("BRAEBURN_DEVICE", "cpu")
    theirs = _runs.Run("transformers", tmp_path).trainer(record=False)
    ours = _runs.Run("braeburn", tmp_path).trainer(record=False)
    return theirs, ours


def _public(names) -> set[str]:
    return {name for name in names if not name.startswith("_")}


def test_the_list_is_exactly_what_braeburn_lacks(trainers):
    import transformers

    theirs, ours = trainers
    peer = _public(dir(transformers.Trainer)) | _public(vars(theirs))
    lacking = {name for name in peer if name not in dir(ours) and name not in vars(ours)}
    assert lacking == _listed_for(transformers.__version__)


def _listed_for(version: str) -> set[str]:
    """The names the list expects on this Transformers: all but those a later release added (``SINCE``)."""
    release = tuple(int(part) for part in version.split(".")[:2])
    return {name for name in MISSING_ON_TRAINER if SINCE.get(name, (0, 0)) <= release}


def test_the_names_a_later_release_added_are_absent_from_this_transformers_and_from_braeburn(trainers):
    """On a Transformers older than a listed name (5.17 has no Trainer.end), the name is on neither Trainer, and
    braeburn's refusal says which release has it."""
    import transformers

    theirs, ours = trainers
    later = set(MISSING_ON_TRAINER) - _listed_for(transformers.__version__)
    assert set(SINCE) <= set(MISSING_ON_TRAINER)
    for name in later:
        assert not hasattr(type(theirs), name) and name not in vars(theirs) and not hasattr(ours, name)
    assert _listed_for("5.17.0") == set(MISSING_ON_TRAINER) - {"end", "loss_is_scaled_for_ga",
                                                                "is_distributed_loading_by_transformers"}
    with pytest.raises(NotInBraeburn, match=r"Trainer\.end is Transformers' 5\.18\+ and braeburn"):
        ours.end


@pytest.mark.parametrize("name", sorted(MISSING_ON_TRAINER))
def test_each_missing_name_is_refused_with_the_way_out(trainers, name):
    _, ours = trainers
    with pytest.raises(NotInBraeburn) as raised:
        getattr(ours, name)
    message = str(raised.value)
    assert f"Trainer.{name}" in message and MISSING_ON_TRAINER[name] in message
    assert not hasattr(ours, name)  # still an AttributeError for hasattr / getattr with a default


def test_other_names_stay_plain_attribute_errors(trainers):
    _, ours = trainers
    with pytest.raises(AttributeError) as raised:
        ours.no_such_name
    assert type(raised.value) is AttributeError


@pytest.mark.parametrize("name", sorted(MISSING_CALLBACKS))
def test_transformers_callbacks_refused_on_import(name):
    transformers = pytest.importorskip("transformers")
    assert hasattr(transformers, name)
    with pytest.raises(ImportError, match=f"{name} is a Transformers callback") as raised:
        exec(f"from braeburn import {name}", {})
    assert MISSING_CALLBACKS[name] in str(raised.value)


def test_a_subclass_or_mixin_that_defines_a_missing_name_has_it_and_lists_it(trainers):
    """The refusals sit on braeburn.Trainer's class: a subclass's own method under a refused name is listed by dir(),
    and a mixin listed after braeburn.Trainer gives its names (a method, a property) as it did before the refusals
    left __getattr__; a name still missing is refused and left out of dir()."""
    import braeburn

    _, ours = trainers

    class Search(braeburn.Trainer):
        def hyperparameter_search(self, *args, **kwargs):
            return "own"

        def base_search(self):
            return super().hyperparameter_search()  # refused: braeburn.Trainer has none

    class Smoothing:
        def hyperparameter_search(self, *args, **kwargs):
            return "mixin"

        @property
        def label_smoother(self):
            return "smoothed"

    class Mixed(braeburn.Trainer, Smoothing):
        pass

    for kind in (Search, Mixed):
        ours.__class__ = kind  # the same instance read through each class (no second Trainer built)
        assert "hyperparameter_search" in dir(ours) and "deepspeed" not in dir(ours)
        with pytest.raises(NotInBraeburn):
            ours.deepspeed
    assert ours.hyperparameter_search() == "mixin" and ours.label_smoother == "smoothed"
    assert getattr(Mixed, "label_smoother") is vars(Smoothing)["label_smoother"]
    ours.__class__ = Search
    assert ours.hyperparameter_search() == "own" and not hasattr(ours, "label_smoother")
    with pytest.raises(NotInBraeburn, match="Trainer.hyperparameter_search"):
        ours.base_search()
