"""delta-spark as a peer: an independent reader, a concurrent writer and a performance anchor.

delta-spark runs in its own environment (``.venv-delta``, set up by ``make peer`` from
``peer/requirements.txt`` and ``peer/pom.xml``), in a worker process (``peer/worker.py``)
that tests and benchmarks drive through :class:`peer.client.DeltaSparkPeer`. serialake
never imports it.
"""
