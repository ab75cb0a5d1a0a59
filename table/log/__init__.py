"""The log side of a table: Delta actions, the schema, replay into a state, snapshots, checkpoints, history
and transactions. Nothing here reads or writes data files."""
