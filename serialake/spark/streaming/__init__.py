"""Structured Streaming on serialake tables: the exactly-once sink (``sink``), the incremental
source (``source``), and the change data feed as a stream."""
