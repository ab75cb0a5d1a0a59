"""The operations on a table, one module each (as delta-rs's ``operations/``): each plans on a snapshot,
writes what it must through the staging path, and commits one log entry through the one transaction path
(``table.log.transaction``), which judges conflicts and knows nothing of the operation.

- :mod:`~table.operations.delete`, :mod:`~table.operations.update`, :mod:`~table.operations.merge`: row-level
  changes (copy-on-write), sharing the SQL engine (:mod:`~table.engine`), the predicate binder
  (:mod:`~table.operations.predicate`), the scan planner (:mod:`~table.operations.scan`) and the rewrite
  and re-plan loop (:mod:`~table.operations.rewrite`).
"""
