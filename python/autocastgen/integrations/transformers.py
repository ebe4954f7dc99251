"""autocastgen in transformers' ``Trainer``: ``AutocastgenCallback`` loads a policy, counts autocast's
statistics every N steps into the Trainer's logs and writes the report page at the end
(docs/training.md, "transformers' Trainer").

    from autocastgen.integrations.transformers import AutocastgenCallback
    trainer = Trainer(model=model, args=TrainingArguments(..., bf16=True), train_dataset=data)
    AutocastgenCallback("policy.yaml", report="run.html").add_to(trainer)
    trainer.train()

The Trainer autocasts through Accelerate (``bf16=True`` / ``fp16=True``: its ``Accelerator`` wraps the
model's forward in ``torch.autocast``), and the policy's kernels follow ``torch.autocast``: the callback
only loads the policy, attaches the model where its rules scope to modules, and observes.

Note [figures in the Trainer's logs]
A counted step's figures (``insight.TensorBoard``'s: ``autocastgen/calls/bfloat16``,
``autocastgen/casts``, ...) are added to the logs the Trainer makes at that step, in ``on_log``. The
Trainer hands one dict to its callbacks in turn, and its loggers (``report_to``: TensorBoard, W&B...)
come first in that list and write the dict as it is when their turn comes; ``add_to`` therefore
puts the callback ahead of them (``Trainer.add_callback`` and ``callbacks=[...]`` put it after). A
callback given through ``callbacks=`` still gets its figures into ``trainer.state.log_history`` and
to the callbacks after it (the progress printer), and warns once that the loggers miss them.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from ..insight import Stats, TensorBoard, stats
from ..reporter import report
from ._packages import TrainerCallback
from ._policy import PolicyRun

__all__ = ["AutocastgenCallback"]


class _Figures:
    """``insight.TensorBoard``'s writer that keeps the last step's figures for the Trainer's logs."""

    def __init__(self) -> None:
        self.pending: dict[str, float] = {}

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self.pending[tag] = value


class AutocastgenCallback(TrainerCallback):
    """A ``TrainerCallback`` that trains under an autocastgen policy and observes autocast.

    Args:
        policy: a policy file, YAML text, or None (the kernels loaded already). Loaded in each
            process that trains (Note [a policy per process] in autocastgen/integrations/_policy.py),
            at the end of the Trainer's construction and again at the start of training.
        stats_every: count autocast's statistics in every N-th optimizer step and add their figures
            to that step's logs (Note [figures in the Trainer's logs]); default: the Trainer's
            ``logging_steps``, so the figures come with the loss; 0: never.
        report: write the report page (``autocastgen.report``) of the last counted step there when
            training ends, on the main process; the model is attached for it, so the page shows
            the module tree.
        ranges: count value ranges too (``autocastgen.stats(ranges=True)``: float16 headroom per
            place in the report).
        attach: attach the model (``autocastgen.attach``) so that the policy's ``modules:`` rules
            apply, paths as ``model.named_modules()`` names them; default: when the loaded rules
            scope to modules, or a report is asked for.
    """

    def __init__(
        self,
        policy: str | os.PathLike[str] | None = None,
        *,
        stats_every: int | None = None,
        report: str | os.PathLike[str] | None = None,
        ranges: bool = False,
        attach: bool | None = None,
    ) -> None:
        if stats_every is not None and (isinstance(stats_every, bool) or not isinstance(stats_every, int)
                                        or stats_every < 0):
            raise ValueError(f"AutocastgenCallback: stats_every must be an int >= 0 (0: never), got {stats_every!r}")
        if stats_every == 0 and report is not None:
            raise ValueError("AutocastgenCallback: a report needs counted steps, but stats_every=0 counts none")
        self.policy = PolicyRun(policy, True if attach is None and report is not None else attach)
        self.stats_every = stats_every
        self.report = None if report is None else os.path.abspath(os.fspath(report))
        self.ranges = ranges
        self.last_counted: Stats | None = None
        self._every = 0
        self._counting: Stats | None = None
        self._figures = _Figures()
        self._board = TensorBoard(self._figures)
        self._ahead_of_loggers = False
        self._warned = False

    def add_to(self, trainer: Any) -> AutocastgenCallback:
        """Adds this callback to ``trainer`` ahead of its loggers (Note [figures in the Trainer's
        logs]) and returns it."""
        callbacks = trainer.callback_handler.callbacks
        if self in callbacks:
            callbacks.remove(self)
        callbacks.insert(0, self)
        self._ahead_of_loggers = True
        return self

    def on_init_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.policy.load()

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if not (args.bf16 or args.fp16):
            warnings.warn("AutocastgenCallback: TrainingArguments has neither bf16 nor fp16, so the Trainer does not "
                          "autocast and the policy changes nothing", stacklevel=2)
        self.policy.check_device(args.device.type, "AutocastgenCallback")
        if model is not None:
            self.policy.start(model)
        self._every = state.logging_steps if self.stats_every is None else self.stats_every
        self.last_counted = None

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._every and (state.global_step + 1) % self._every == 0 and self._counting is None:
            self._counting = stats(ranges=self.ranges).__enter__()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._counting is None:
            return
        counted, self._counting = self._counting, None
        counted.__exit__(None, None, None)
        self.last_counted = counted
        self._board.log(state.global_step, stats=counted)
        control.should_log = True  # the Trainer logs this step, with the figures

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        pending, self._figures.pending = self._figures.pending, {}
        if not pending or logs is None:
            return
        logs.update(pending)
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update(pending)  # the Trainer appended a copy before calling us
        if not self._ahead_of_loggers and args.report_to and not self._warned:
            self._warned = True
            warnings.warn(f"AutocastgenCallback: added after the Trainer's loggers ({', '.join(args.report_to)}), "
                          "which do not see its figures: add it with AutocastgenCallback(...).add_to(trainer)",
                          stacklevel=2)

    def on_train_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if self._counting is not None:  # training stopped inside a counted step
            self._counting.__exit__(None, None, None)
            self._counting = None
        if self.report is not None and state.is_world_process_zero:
            if self.last_counted is None:
                warnings.warn(f"AutocastgenCallback: no step was counted (stats_every={self._every}, "
                              f"{state.global_step} steps), so there is no report to write to {self.report}",
                              stacklevel=2)
            else:
                report(self.last_counted, output=self.report, model=model)
        self.policy.stop()
