"""Optional dependencies, imported only by the features that need them.

The library itself needs none: ``serialake verify`` needs networkx (the ``verify`` extra; moto too for ``--s3``),
``serialake demo`` matplotlib (the ``demo`` extra), and Delta's DynamoDB commit protocol on S3 boto3
(the ``dynamodb`` extra). :func:`require` imports one when
it is used, and when it is missing says which extra to install.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["EXTRAS", "MissingExtraError", "require"]

#: The extra of ``pyproject.toml`` that installs each optional module.
EXTRAS = {"networkx": "verify", "moto": "verify", "matplotlib": "demo", "boto3": "dynamodb", "botocore": "dynamodb"}


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the extra that installs it."""


def require(module: str, feature: str) -> ModuleType:
    """Import ``module`` for ``feature``, or raise :class:`MissingExtraError` naming its extra."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        top = module.split(".", 1)[0]
        extra = EXTRAS.get(top)
        install = f"pip install 'serialake[{extra}]'" if extra else f"pip install {top}"
        raise MissingExtraError(
            f"{feature} needs {top}, which is not installed: {install}", name=top
        ) from e
