"""The Delta log: log files and segments, replay into snapshots, the live files, checkpoints, the
change data feed. ``DeltaLog`` is a table's door to its snapshots and transactions.
"""
