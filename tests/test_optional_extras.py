"""matplotlib and networkx are optional: the ``demo`` and ``verify`` extras, imported only when used.

Each check runs in a fresh interpreter (``python -c``), so ``sys.modules`` holds only what
the imports in it loaded.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

OPTIONAL = ("matplotlib", "networkx")

NOT_LOADED = """
import sys
import serialake, serialake.cli
serialake.cli.build_parser()
loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'networkx'))
assert not loaded, f'imported: {loaded}'
print('ok')
"""

# With both made unimportable: the modules still import, and each feature names its extra.
MISSING = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('matplotlib', 'networkx'):
            raise ImportError(f'{name} is blocked in this test')
        return None
sys.meta_path.insert(0, Block())
import serialake, serialake.cli, serialake.demo, serialake.timeline
import serialake.verify.checker, serialake.verify.runner, serialake.verify.workload, serialake.verify.rows
from serialake.extras import MissingExtraError

def message(call):
    try:
        call()
    except MissingExtraError as e:
        return str(e)
    raise AssertionError(f'{call} did not fail')

msg = message(lambda: serialake.timeline.render_png([], 'x.png'))
assert "pip install 'serialake[demo]'" in msg and 'matplotlib' in msg, msg
msg = message(serialake.verify.checker._networkx)
assert "pip install 'serialake[verify]'" in msg and 'networkx' in msg, msg
assert serialake.cli.main(['verify', '--processes', '1', '--txns', '1']) == 1
assert serialake.cli.main(['demo', '--json']) == 1
print('ok')
"""


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, cwd=ROOT)


def test_importing_serialake_and_the_cli_loads_no_optional_dependency() -> None:
    out = _run(NOT_LOADED)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_without_the_extras_verify_and_demo_name_the_extra_to_install() -> None:
    out = _run(MISSING)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
    # The commands stop at once (no workload, no Spark), saying what to install.
    assert "serialake verify: serialake verify needs networkx" in out.stderr
    assert "pip install 'serialake[verify]'" in out.stderr
    assert "pip install 'serialake[demo]'" in out.stderr


def test_pyproject_puts_them_in_extras_and_make_installs_them() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [re.split(r"[<>=!~\[ ;]", d, maxsplit=1)[0].lower() for d in project["dependencies"]]
    assert not set(OPTIONAL) & set(names), names
    extras = project["optional-dependencies"]
    assert any(d.startswith("networkx") for d in extras["verify"])
    assert any(d.startswith("matplotlib") for d in extras["demo"])
    assert "serialake[verify,demo]" in extras["test"]
    install = re.search(r'pip install -q -e "\.\[([^\]]*)\]"', (ROOT / "Makefile").read_text())
    assert install is not None
    assert {"test", "verify", "demo"} <= set(install.group(1).split(","))
