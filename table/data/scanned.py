"""A pyarrow dataset whose rows come from a stream made for each scan: how ``to_pyarrow_dataset`` gives a
table whose rows pyarrow's own scan cannot produce (deletion vectors drop rows by position; column mapping
renames a file's columns), lazily, to DuckDB, polars and pyarrow alike.

:class:`ScannedDataset` is a ``pyarrow.dataset.Dataset`` (DuckDB and polars check for one) whose public
methods (``scanner``, ``to_batches``, ``to_table``, ``head``, ``count_rows``, ``take``, ``filter``, ...)
each start a new stream, ``open(columns, filter)``, the projection and filter pushed into it (files pruned
by their statistics, columns not read), and wrap it in a ``pyarrow.dataset.Scanner``. DuckDB calls
``scanner(columns=..., filter=...)``, polars ``to_batches(columns=..., filter=...)``: both stream.

Its invariant: nothing reads rows but ``open``. pyarrow code that reaches past the Python methods into the
C++ dataset (``Scanner.from_dataset``, ``UnionDataset``, ``get_fragments``) finds one fragment on a
filesystem that refuses every call with a message saying what to call instead, never an empty table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs

__all__ = ["ScannedDataset", "StreamedFilesDataset"]

Open = Callable[[Sequence[str] | None, pc.Expression | None], pa.RecordBatchReader]
"""``open(columns, filter)``: a new stream of the rows of the dataset matching ``filter``, ``columns`` only."""

_REFUSAL = ("this dataset applies deletion vectors or column mapping as it scans, which pyarrow's C++ scan "
            "cannot: scan it through its own methods (scanner(), to_batches(), to_table(); DuckDB and polars do), "
            "or read the table with Table.to_pyarrow_reader()")


class ScannedDataset(ds.FileSystemDataset):
    """A dataset of ``schema`` whose every scan reads ``open(columns, filter)`` (module docstring)."""

    def __init__(self, schema: pa.Schema, open: Open, *, filter: pc.Expression | None = None, what: str = "table"):
        fmt = ds.ParquetFileFormat()
        refusing = pafs.PyFileSystem(_Refusing())
        super().__init__([fmt.make_fragment("rows", filesystem=refusing, file_size=1)], schema, fmt, refusing)
        self._open, self._filter, self._what = open, filter, what

    def __reduce__(self):
        raise TypeError(f"a dataset of {self._what} cannot be pickled (its scans read through this process's "
                        f"clients); pickle the table's URI and open the dataset where it is read")

    def scanner(self, columns: Sequence[str] | dict[str, pc.Expression] | None = None,
                filter: pc.Expression | None = None, **options: Any) -> ds.Scanner:
        """A scanner over a new stream of the rows (``options``: those of ``Scanner.from_batches``)."""
        wanted = self._filter if filter is None else filter if self._filter is None else self._filter & filter
        if isinstance(columns, dict):  # computed columns: pyarrow projects the streamed rows
            return ds.Scanner.from_batches(self._open(None, wanted), columns=columns, **options)
        return ds.Scanner.from_batches(self._open(None if columns is None else list(columns), wanted), **options)

    def to_batches(self, **scan: Any):
        return self.scanner(**scan).to_batches()

    def to_table(self, **scan: Any) -> pa.Table:
        return self.scanner(**scan).to_table()

    def head(self, num_rows: int, **scan: Any) -> pa.Table:
        return self.scanner(**scan).head(num_rows)

    def take(self, indices: Any, **scan: Any) -> pa.Table:
        return self.scanner(**scan).take(indices)

    def count_rows(self, filter: pc.Expression | None = None, **scan: Any) -> int:
        return sum(batch.num_rows for batch in self.scanner(columns=[], filter=filter, **scan).to_batches())

    def filter(self, expression: pc.Expression) -> ScannedDataset:
        wanted = expression if self._filter is None else self._filter & expression
        return ScannedDataset(self.schema, self._open, filter=wanted, what=self._what)

    def sort_by(self, sorting: Any, **options: Any) -> ds.InMemoryDataset:
        return ds.InMemoryDataset(self.to_table()).sort_by(sorting, **options)

    def join(self, right_dataset: Any, *args: Any, **options: Any) -> ds.InMemoryDataset:
        return ds.InMemoryDataset(self.to_table()).join(right_dataset, *args, **options)

    def join_asof(self, right_dataset: Any, *args: Any, **options: Any) -> ds.InMemoryDataset:
        return ds.InMemoryDataset(self.to_table()).join_asof(right_dataset, *args, **options)

    def get_fragments(self, filter: pc.Expression | None = None):
        raise NotImplementedError(f"{self._what}: {_REFUSAL}")

    def replace_schema(self, schema: pa.Schema):
        raise NotImplementedError(f"{self._what}: its schema is the table's; cast the scanned batches instead")


class StreamedFilesDataset(ds.FileSystemDataset):
    """A table's data files as pyarrow's own ``FileSystemDataset``, whose streaming scans (``scanner()``,
    ``to_batches()``: what DuckDB and polars call) read one file at a time and a few batches ahead unless
    told otherwise, as ``Table.to_pyarrow_reader`` reads files of a row group or more: pyarrow's defaults (4
    files, 16 batches ahead) hold up to 4 files' row groups at once, so a scan's peak memory grew with the
    table until it had 4 files of 128 MiB. ``to_table()``, ``head()``, ``count_rows()`` and ``take()``, which
    hold their result anyway, keep pyarrow's read-ahead; so does ``Scanner.from_dataset``, which does not
    pass through these methods. Options given explicitly are used as given."""

    FRAGMENT_READAHEAD = 1
    BATCH_READAHEAD = 4

    @classmethod
    def of(cls, files: ds.FileSystemDataset) -> StreamedFilesDataset:
        return cls(list(files.get_fragments()), files.schema, files.format, files.filesystem)

    def scanner(self, columns: Any = None, filter: pc.Expression | None = None, **options: Any) -> ds.Scanner:
        options.setdefault("fragment_readahead", self.FRAGMENT_READAHEAD)
        options.setdefault("batch_readahead", self.BATCH_READAHEAD)
        return super().scanner(columns=columns, filter=filter, **options)

    def to_batches(self, columns: Any = None, filter: pc.Expression | None = None, **options: Any):
        return self.scanner(columns=columns, filter=filter, **options).to_batches()


class _Refusing(pafs.FileSystemHandler):
    """The filesystem of the dataset's placeholder fragment: every call raises :data:`_REFUSAL`."""

    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other

    def get_type_name(self) -> str:
        return "dynacommit-scanned"

    def normalize_path(self, path: str) -> str:
        return path

    def _refuse(self, *args: Any, **kwargs: Any):
        raise NotImplementedError(_REFUSAL)

    get_file_info = get_file_info_selector = create_dir = delete_dir = delete_dir_contents = _refuse
    delete_root_dir_contents = delete_file = move = copy_file = _refuse
    open_input_stream = open_input_file = open_output_stream = open_append_stream = _refuse
