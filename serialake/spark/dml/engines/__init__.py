"""The engines of DML data work: one protocol (``base.DataEngine``), on the driver with pyarrow
(``driver``) or on Spark (``spark``, MERGE's joins in ``spark_merge``). ``dml.engine`` picks."""
