"""House rules that keep the structure (issue 29): test modules import shared helpers only from
``tests/_support`` and never from one another, nothing edits ``sys.path``, the dotted paths in
ipukern's docstrings resolve, and no module or function grows past its size limit outside the
recorded exceptions below.

The exception tables hold today's numbers as upper bounds: an entry may only shrink, and an entry
that shrinks, goes under the limit or disappears must be updated or removed. After moving code,
regenerate them from the tree's root with::

    python -m tests.test_house --regen     # print the current tables
    python -m tests.test_house --write     # rewrite them in this file
"""
from __future__ import annotations

import ast
import importlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
PACKAGE = ROOT / "ipukern"

MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 80
MAX_PARAMETERS = 8

# BEGIN GENERATED (python -m tests.test_house --write)
#: modules over MAX_MODULE_LINES lines: path -> line count (an upper bound)
LONG_MODULES = {
    'ipukern/_kernels/_vertices.pyx': 869,
}

#: functions over MAX_FUNCTION_LINES lines (``def`` to last line): "module:qualname" -> lines
LONG_FUNCTIONS = {
    'ipukern.conv.codelet:conv_tiles_checked': 101,
    'ipukern.nn.training:_schedule': 126,
    'ipukern.plots:plot_memory_heatmap': 88,
    'ipukern.scaling:grouped_conv_sweep': 113,
    'ipukern.systems.stage_memory:stage_liveness': 112,
    'ipukern.systems.train_run:run_training_step': 94,
    'ipukern.systems.training:_compose': 81,
    'ipukern.systems.training:estimate_training': 113,
}

#: functions over MAX_PARAMETERS parameters (positional and keyword-only, not self/cls):
#: "module:qualname" -> parameters
WIDE_FUNCTIONS = {
    'ipukern.conv.codelet:conv_tiles_checked': 18,
    'ipukern.conv.estimators.candidates:_method': 9,
    'ipukern.conv.estimators:conv_vertex_cycles_array': 12,
    'ipukern.conv.layout:_block_pieces': 12,
    'ipukern.conv.layout:_partial_pieces': 13,
    'ipukern.conv.layout:_run_range_pieces': 12,
    'ipukern.conv.search:_score_method': 9,
    'ipukern.core.copies:check_exchange_bounds': 9,
    'ipukern.core.copies:check_exchange_table': 9,
    'ipukern.core.program:Exchange.__init__': 10,
    'ipukern.gpu.model:_estimate': 9,
    'ipukern.gpu.model:estimate_matmul': 9,
    'ipukern.gpu.system:estimate_network_gpu': 9,
    'ipukern.graph.tensor:GraphTensor.__init__': 9,
    'ipukern.nn.api:estimate_network': 12,
    'ipukern.nn.api:run_network': 10,
    'ipukern.nn.convops:conv_plan': 11,
    'ipukern.nn.convops:matmul_plan': 9,
    'ipukern.nn.grad_cycles:pool_grad_cycles': 10,
    'ipukern.nn.grad_ops:_row': 10,
    'ipukern.nn.ops:_max_pool': 11,
    'ipukern.nn.profile:NetworkProfile.__init__': 13,
    'ipukern.nn.tile_reduce:ChannelReduce.__init__': 10,
    'ipukern.nn.tile_reduce:channel_reduce': 10,
    'ipukern.nn.train_exec:train_step': 9,
    'ipukern.nn.zoo_cnn:conv_bn_act': 12,
    'ipukern.ops.conv:conv2d': 11,
    'ipukern.ops.conv:estimate_conv2d': 12,
    'ipukern.ops.conv:plan_conv2d': 12,
    'ipukern.ops.conv_grad:conv2d_backward_data': 10,
    'ipukern.ops.conv_grad:conv2d_backward_weight': 10,
    'ipukern.ops.conv_grad:estimate_conv2d_backward_data': 10,
    'ipukern.ops.conv_grad:estimate_conv2d_backward_weight': 10,
    'ipukern.ops.optim:_lamb_steps': 9,
    'ipukern.ops.optim:_lars_steps': 10,
    'ipukern.scaling:grouped_conv_sweep': 11,
    'ipukern.systems.bsp:LinkExchange.__init__': 9,
    'ipukern.systems.stage_memory:TileMemory.__init__': 12,
    'ipukern.systems.stage_memory:stage_liveness': 11,
    'ipukern.systems.stage_memory:tile_memory': 12,
    'ipukern.systems.train_run:_forward': 10,
    'ipukern.systems.train_run:_result': 9,
    'ipukern.systems.train_run:run_training_step': 9,
}

#: dotted paths in ipukern's docstrings that do not resolve today: "file: path" (fix, then remove)
STALE_DOCSTRING_PATHS = [
]
# END GENERATED


# --------------------------------------------------------------------------- the tree's files
def _py_files(top: Path) -> list[Path]:
    return sorted(p for p in top.rglob("*.py") if "__pycache__" not in p.parts)


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


# --------------------------------------------------------------------------- imports in the tests
def _local_names() -> set[str]:
    """Every name a file under tests/ or bench/ could be imported by were its folder on
    ``sys.path`` (a bare ``import test_mpi`` or ``from conv.test_codelet import ...``)."""
    names = set()
    for top in (TESTS, ROOT / "bench"):
        for p in _py_files(top):
            names.add(p.stem)
            names.update(part for part in p.relative_to(top).parts[:-1])
    names.discard("__init__")
    return names


def import_violations() -> list[str]:
    """Imports in tests/ and bench/ of anything in tests/ but ``from tests._support.<module>
    import ...``, of bench's test modules, and relative imports (bench's helpers, on its
    pythonpath, import by their bare names)."""
    bench_helpers = {p.stem for p in _py_files(ROOT / "bench") if not p.stem.startswith("test_")}
    local = _local_names() - bench_helpers   # bench's helpers are bench's own (its pythonpath)
    bad = []
    for path in _py_files(TESTS) + _py_files(ROOT / "bench"):
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.Import):
                mods = [(a.name, f"import {a.name}") for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    bad.append(f"{_rel(path)}:{node.lineno}: relative import "
                               f"'from {'.' * node.level}{node.module or ''} import ...'")
                    continue
                mods = [(node.module or "", f"from {node.module} import ...")]
            else:
                continue
            for mod, text in mods:
                top = mod.split(".")[0]
                if top == "tests":
                    ok = (isinstance(node, ast.ImportFrom) and mod.startswith("tests._support.")
                          and mod.count(".") == 2)
                    if not ok:
                        bad.append(f"{_rel(path)}:{node.lineno}: '{text}' (import shared helpers as "
                                   f"'from tests._support.<module> import <names>')")
                elif top in local:
                    bad.append(f"{_rel(path)}:{node.lineno}: '{text}' imports a file of tests/ or "
                               f"bench/ by its bare name (move it to tests/_support)")
    return bad


def test_test_modules_import_helpers_only_from_tests_support():
    bad = import_violations()
    assert not bad, "imports against the house rules:\n  " + "\n  ".join(bad)


def test_support_holds_no_tests():
    tests_in_support = [f"{_rel(p)}: {n.name}" for p in _py_files(TESTS / "_support")
                        for n in _parse(p).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))
                        and n.name.startswith(("test", "Test"))]
    assert not tests_in_support, tests_in_support


# --------------------------------------------------------------------------- sys.path
_PATH_METHODS = {"insert", "append", "extend", "remove", "pop", "clear", "__setitem__", "__delitem__"}


def _is_sys_path(node: ast.AST) -> bool:
    if isinstance(node, ast.Subscript):
        node = node.value
    return (isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name)
            and node.value.id == "sys")


def sys_path_edits() -> list[str]:
    """Assignments to ``sys.path`` (or its items), calls of its mutating methods, ``del`` of
    its items and ``site.addsitedir`` in tests/ and bench/ (reading it is fine)."""
    bad = []
    for path in _py_files(TESTS) + _py_files(ROOT / "bench"):
        for node in ast.walk(_parse(path)):
            targets = []
            if isinstance(node, (ast.Assign, ast.Delete)):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            hit = any(_is_sys_path(t) for t in targets)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                hit |= node.func.attr in _PATH_METHODS and _is_sys_path(node.func.value)
                hit |= (node.func.attr == "addsitedir" and isinstance(node.func.value, ast.Name)
                        and node.func.value.id == "site")
            if hit:
                bad.append(f"{_rel(path)}:{node.lineno}: {ast.unparse(node).splitlines()[0]}")
    return bad


def test_no_sys_path_edits_in_tests():
    bad = sys_path_edits()
    assert not bad, ("sys.path edited (import from tests._support; a subprocess gets PYTHONPATH in "
                     "its environment):\n  " + "\n  ".join(bad))


# --------------------------------------------------------------------------- docstrings
_DOTTED = re.compile(r"(?<![\w./-])ipukern(?:\.[A-Za-z_]\w*)+")


def _docstrings(tree: ast.Module):
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield (getattr(node, "lineno", 1), doc)


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for name in parts[i:]:
                obj = getattr(obj, name)
        except AttributeError:
            return False
        return True
    return False


def stale_docstring_paths() -> dict[str, int]:
    """Dotted ``ipukern.xxx.yyy`` paths in ipukern's docstrings that neither import nor
    resolve as an attribute of a module that does: {"file: path": first docstring's line}."""
    bad: dict[str, int] = {}
    for path in _py_files(PACKAGE):
        for lineno, doc in _docstrings(_parse(path)):
            for m in sorted(set(_DOTTED.findall(doc))):
                if not _resolves(m):
                    bad.setdefault(f"{_rel(path)}: {m}", lineno)
    return bad


def test_docstring_module_paths_resolve():
    now = stale_docstring_paths()
    new = [f"{k} (docstring at line {now[k]})" for k in sorted(set(now) - set(STALE_DOCSTRING_PATHS))]
    fixed = sorted(set(STALE_DOCSTRING_PATHS) - set(now))
    assert not new, "stale dotted paths in docstrings (fix the docstring):\n  " + "\n  ".join(new)
    assert not fixed, ("fixed or gone, remove from STALE_DOCSTRING_PATHS:\n  " + "\n  ".join(fixed)
                       + "\n" + _REGEN)


# --------------------------------------------------------------------------- sizes
def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def module_sizes() -> dict[str, int]:
    """Line counts of ipukern's modules (Python and Cython) over MAX_MODULE_LINES."""
    files = sorted(p for ext in ("*.py", "*.pyx", "*.pxd") for p in PACKAGE.rglob(ext)
                   if "__pycache__" not in p.parts)
    sizes = {_rel(p): len(p.read_text(encoding="utf-8").splitlines()) for p in files}
    return {k: n for k, n in sizes.items() if n > MAX_MODULE_LINES}


def _functions(tree: ast.Module):
    """(qualname, node) of every function, methods and nested functions included."""
    stack = [("", n) for n in tree.body]
    while stack:
        prefix, node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            qual = f"{prefix}{node.name}"
            if not isinstance(node, ast.ClassDef):
                yield qual, node
            stack.extend((f"{qual}.", n) for n in ast.iter_child_nodes(node))
        else:
            stack.extend((prefix, n) for n in ast.iter_child_nodes(node))


def _n_params(fn: ast.FunctionDef) -> int:
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    return len(names) + len(a.kwonlyargs)


def function_sizes() -> tuple[dict[str, int], dict[str, int]]:
    """({"module:qualname": lines} over MAX_FUNCTION_LINES, {...: parameters} over
    MAX_PARAMETERS) for ipukern's Python modules."""
    long, wide = {}, {}
    for path in _py_files(PACKAGE):
        mod = _module_name(path)
        for qual, fn in _functions(_parse(path)):
            key = f"{mod}:{qual}"
            lines = fn.end_lineno - fn.lineno + 1
            if lines > MAX_FUNCTION_LINES:
                long[key] = max(lines, long.get(key, 0))    # a name defined twice: the larger
            n = _n_params(fn)
            if n > MAX_PARAMETERS:
                wide[key] = max(n, wide.get(key, 0))
    return long, wide


def ratchet(what: str, limit: int, now: dict[str, int], recorded: dict[str, int]) -> list[str]:
    """Differences between the measured table ``now`` (entries over ``limit``) and the recorded
    exceptions: new entries, entries grown past their bound, entries that shrank (lower the
    bound) or are gone or under the limit (remove them)."""
    out = []
    for key in sorted(set(now) | set(recorded)):
        n, bound = now.get(key), recorded.get(key)
        if bound is None:
            out.append(f"{key}: {n} {what} > {limit} (new; split it)")
        elif n is None:
            out.append(f"{key}: recorded at {bound}, now gone or within {limit} {what} (remove the entry)")
        elif n > bound:
            out.append(f"{key}: {n} {what} > recorded bound {bound} (grew; split it)")
        elif n < bound:
            out.append(f"{key}: {n} {what} < recorded bound {bound} (shrank; lower the bound)")
    return out


_REGEN = "regenerate with: python -m tests.test_house --write (after checking the entries above)"


def test_module_sizes():
    bad = ratchet("lines", MAX_MODULE_LINES, module_sizes(), LONG_MODULES)
    assert not bad, "module sizes against LONG_MODULES:\n  " + "\n  ".join(bad) + "\n" + _REGEN


def test_function_lengths():
    bad = ratchet("lines", MAX_FUNCTION_LINES, function_sizes()[0], LONG_FUNCTIONS)
    assert not bad, "function lengths against LONG_FUNCTIONS:\n  " + "\n  ".join(bad) + "\n" + _REGEN


def test_function_parameters():
    bad = ratchet("parameters", MAX_PARAMETERS, function_sizes()[1], WIDE_FUNCTIONS)
    assert not bad, "parameter counts against WIDE_FUNCTIONS:\n  " + "\n  ".join(bad) + "\n" + _REGEN


# --------------------------------------------------------------------------- regeneration
def _table(comment: str, name: str, entries: dict[str, int]) -> str:
    rows = "".join(f"    {k!r}: {v},\n" for k, v in sorted(entries.items()))
    return f"{comment}{name} = {{\n{rows}}}\n"


def generated_tables() -> str:
    """The GENERATED block of this file for the tree as it is now."""
    long, wide = function_sizes()
    return ("# BEGIN GENERATED (python -m tests.test_house --write)\n"
            + _table("#: modules over MAX_MODULE_LINES lines: path -> line count (an upper bound)\n",
                     "LONG_MODULES", module_sizes())
            + "\n"
            + _table("#: functions over MAX_FUNCTION_LINES lines (``def`` to last line): "
                     "\"module:qualname\" -> lines\n", "LONG_FUNCTIONS", long)
            + "\n"
            + _table("#: functions over MAX_PARAMETERS parameters (positional and keyword-only, not "
                     "self/cls):\n#: \"module:qualname\" -> parameters\n", "WIDE_FUNCTIONS", wide)
            + "\n#: dotted paths in ipukern's docstrings that do not resolve today: \"file: path\" "
            + "(fix, then remove)\nSTALE_DOCSTRING_PATHS = [\n"
            + "".join(f"    {k!r},\n" for k in sorted(stale_docstring_paths()))
            + "]\n# END GENERATED\n")


def main(argv: list[str]) -> int:
    if argv == ["--regen"]:
        print(generated_tables(), end="")
        return 0
    if argv == ["--write"]:
        path = Path(__file__)
        text = path.read_text(encoding="utf-8")
        block = re.compile(r"# BEGIN GENERATED.*?# END GENERATED\n", re.S)
        path.write_text(block.sub(lambda _: generated_tables(), text, count=1), encoding="utf-8")
        print(f"rewrote the exception tables in {_rel(path)}")
        return 0
    print("usage: python -m tests.test_house --regen | --write", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
