"""test_imports.py - the Loader does not depend on the diagnosis tool: importing loaderd or
loaderd.loader does not import loaderd.diagnose, and no module the Loader imports (at the top or
inside a function, followed through the package) names loaderd.diagnose."""
import ast
import os
import subprocess
import sys

from conftest import REPO

PKG = REPO / "python" / "loaderd"


def package_imports(name):
    """The package's modules that module @name imports anywhere in its text (relative imports
    and loaderd.X alike)."""
    tree = ast.parse((PKG / (name + ".py")).read_text())
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom):
            if n.level == 1 and n.module:
                out.add(n.module.split(".")[0])
            elif n.level == 1:
                out.update(a.name for a in n.names)
            elif n.module and n.module.startswith("loaderd."):
                out.add(n.module.split(".")[1])
            elif n.module == "loaderd":
                out.update(a.name for a in n.names)
        elif isinstance(n, ast.Import):
            out.update(a.name.split(".")[1] for a in n.names if a.name.startswith("loaderd."))
    return {m for m in out if (PKG / (m + ".py")).exists()}


def reach(name):
    seen, todo = set(), [name]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += package_imports(m)
    return seen


def test_loader_never_reaches_diagnose():
    r = reach("loader")
    assert "diagnose" not in r, sorted(r)
    assert {"analysis", "_normalize", "profile"} <= r
    # and the other way round the tool uses the Loader's pieces (no copy of them)
    assert {"analysis", "_normalize", "loader"} <= reach("diagnose")


def test_importing_the_loader_does_not_import_diagnose():
    code = ("import sys, loaderd, loaderd.loader; "
            "bad = [m for m in ('loaderd.diagnose',) if m in sys.modules]; "
            "sys.exit('imported: %s' % bad if bad else 0)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(REPO / "python")), timeout=60)
    assert p.returncode == 0, p.stderr + p.stdout
