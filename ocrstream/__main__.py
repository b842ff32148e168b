"""``python -m ocrstream``: the same as the ``ocrstream`` console script."""

from ocrstream.cli import entry

entry()
