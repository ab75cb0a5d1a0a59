"""The data side of a table: Parquet files staged as multipart uploads, their statistics, the job commit
that makes them visible, and reading them back with pyarrow."""
