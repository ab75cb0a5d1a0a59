"""The benchmark harness: dynacommit and ``deltalake==1.6.0`` (DynamoDB log store) side by side.

``python -m tests.benchmarks.harness`` (``make bench``) runs the measures; see ``BENCHMARKS.md`` for what
each one measures and ``__main__.py`` for the options. Nothing here asserts a timing.

This package is imported by both workers, our interpreter's and the peer's (``.venv-peer``, which has
only ``deltalake`` and ``pyarrow``): it and the modules the peer worker imports (``jsonlines``,
``workload``) use only pyarrow and the standard library.
"""
