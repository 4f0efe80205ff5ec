"""The core never imports pyspark: import it with pyspark made unimportable."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == 'pyspark' or name.startswith('pyspark.'):
            raise ImportError('pyspark is blocked in this test')
        return None
sys.meta_path.insert(0, Block())
import serialake, serialake.core, serialake.exceptions, serialake.storage
import serialake.core.txn.conflicts, serialake.core.txn.transaction, serialake.core.log.checkpoint
import serialake.core.predicates.expressions
import serialake.core.predicates.skipping, serialake.core.predicates.row_eval
import serialake.core.model.partition_values, serialake.core.model.types
import pkgutil, importlib
for m in pkgutil.walk_packages(serialake.core.__path__, 'serialake.core.'):
    importlib.import_module(m.name)
assert not any(k.startswith('pyspark') for k in sys.modules)
print('ok')
"""


def test_core_imports_without_pyspark() -> None:
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
