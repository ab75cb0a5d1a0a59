"""The typed metrics every operation returns in ``CommitResult.metrics``, under the name operations import
them by. They are defined in :mod:`table.log.metrics`, beside the commit whose ``operationMetrics`` they
type, so that the job commit of the data path builds them too."""

from table.log.metrics import (
    CloneMetrics,
    DeleteMetrics,
    MergeMetrics,
    OperationMetrics,
    OptimizeMetrics,
    RestoreMetrics,
    UpdateMetrics,
    WriteMetrics,
    metrics_for,
)

__all__ = ["CloneMetrics", "DeleteMetrics", "MergeMetrics", "OperationMetrics", "OptimizeMetrics", "RestoreMetrics",
           "UpdateMetrics", "WriteMetrics", "metrics_for"]
