"""A subclass of braeburn's own Trainer that defines the Transformers Trainer's overridable methods is refused.

``braeburn.Trainer`` calls a subclass's ``compute_loss``, ``training_step``, ``log`` ... where Transformers calls
them. The core Trainer (:class:`~braeburn.trainer.loop.CoreTrainer`) never calls them: a subclass of it that
overrides them would train as if they were not there, silently. So its ``__init__`` refuses one, naming every such
method and the fix, unless the class says it calls them itself (``peer_methods_called``).
"""

from __future__ import annotations

# What users of the Transformers Trainer override to customise it (braeburn.Trainer calls each where Transformers does).
TRANSFORMERS_OVERRIDABLE = ("training_step", "compute_loss", "create_optimizer", "create_scheduler",
                            "prediction_step", "evaluation_loop", "log", "get_train_dataloader",
                            "get_eval_dataloader", "get_test_dataloader", "save_model")


def uncalled(trainer_type: type) -> list[str]:
    """The Transformers Trainer methods ``trainer_type`` defines that it does not call (its ``peer_methods_called``)."""
    called = set(getattr(trainer_type, "peer_methods_called", ()))
    return [name for name in TRANSFORMERS_OVERRIDABLE if name not in called and hasattr(trainer_type, name)]


def refuse_uncalled(trainer_type: type) -> None:
    """TypeError naming every method a subclass of the core Trainer defines that would never be called."""
    names = uncalled(trainer_type)
    if names:
        what, it = ("method", "it") if len(names) == 1 else ("methods", "them")
        raise TypeError(
            f"{trainer_type.__qualname__} defines {', '.join(names)}: the Transformers Trainer's {what}, which "
            f"braeburn's core Trainer (braeburn.trainer.loop.CoreTrainer) never calls, so training would skip {it} "
            "silently. Subclass braeburn.Trainer instead (from braeburn import Trainer): it calls each where "
            "Transformers does.")


__all__ = ["TRANSFORMERS_OVERRIDABLE", "refuse_uncalled", "uncalled"]
