"""autocastgen where people train: transformers' ``Trainer``, Accelerate and Lightning (docs/training.md).

One module per framework, each importing its framework when it is itself imported (Note [the
frameworks' boundary] in _packages.py); ``import autocastgen`` imports none of them:

- ``autocastgen.integrations.transformers``: ``AutocastgenCallback``, a ``TrainerCallback`` that
  loads a policy, counts statistics into the Trainer's logs and writes the report page
  (``pip install autocastgen[transformers]``);
- ``autocastgen.integrations.lightning``: ``AutocastgenPrecision``, a Lightning precision plugin
  that trains under a policy, with ``autocastgen.GradScaler`` for float16
  (``pip install autocastgen[lightning]``).

Accelerate needs no module: a policy loaded with ``autocastgen.load_policy`` is in force inside the
``torch.autocast`` its ``Accelerator(mixed_precision=...)`` enters (docs/training.md, "Accelerate").
The modules' shared part, a policy loaded in each training process, is _policy.py.
"""

__all__: list[str] = []
