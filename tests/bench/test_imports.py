"""forkbench's imports: no module imports itself through others (the graph of
the package's own imports has no loop), and no module imports anything
inside a function, where a loop would hide."""
import ast
import os

from conftest import BENCH

PACKAGE = "forkbench"


def package_modules(root=os.path.join(BENCH, PACKAGE)):
    """{dotted module name: path} of every .py file of the package."""
    mods = {}
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".py"):
                rel = os.path.relpath(os.path.join(folder, name), os.path.dirname(root))
                dotted = rel[:-len(".py")].replace(os.sep, ".")
                mods[dotted[:-len(".__init__")] if dotted.endswith(".__init__") else dotted] = \
                    os.path.join(folder, name)
    return mods


def imported(node, module, is_package, mods):
    """The package's modules one import statement names."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in mods}
    if node.level:
        parts = module.split(".")[:len(module.split(".")) - node.level + is_package]
        base = ".".join(parts + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    found = {base + "." + a.name for a in node.names if base + "." + a.name in mods}
    if len(found) < len(node.names) and base in mods:
        found.add(base)
    return found


def import_graph(mods):
    """{module: the package's modules it imports, anywhere in its file}."""
    graph = {}
    for module, path in mods.items():
        tree = ast.parse(open(path).read(), path)
        graph[module] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[module] |= imported(node, module, path.endswith("__init__.py"), mods)
        graph[module].discard(module)
    return graph


def find_loop(graph):
    """One loop of the graph as [a, b, ..., a], or None."""
    state, path = {}, []

    def visit(m):
        state[m] = "open"
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                return path[path.index(n):] + [n]
            if n not in state:
                loop = visit(n)
                if loop:
                    return loop
        state[m] = "done"
        path.pop()
        return None

    for m in sorted(graph):
        if m not in state:
            loop = visit(m)
            if loop:
                return loop
    return None


def imports_in_functions(path):
    """(line, statement) of every import inside a function of a file."""
    tree = ast.parse(open(path).read(), path)
    found = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            found += [(n.lineno, ast.unparse(n)) for n in ast.walk(fn)
                      if isinstance(n, (ast.Import, ast.ImportFrom))]
    return sorted(set(found))


def test_the_checks_find_a_loop_and_resolve_relative_imports():
    assert find_loop({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_loop({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
    mods = {"p": "p/__init__.py", "p.x": "p/x.py", "p.y": "p/y.py"}
    tree = ast.parse("from . import x\nfrom .y import f\nfrom p import y\nfrom . import g")
    got = [imported(n, "p.x", False, mods) for n in tree.body]
    assert got == [{"p.x"}, {"p.y"}, {"p.y"}, {"p"}]
    assert imported(tree.body[0], "p", True, mods) == {"p.x"}


def test_the_package_imports_form_no_loop():
    graph = import_graph(package_modules())
    assert graph["forkbench.cli"], "no imports found: the parse is broken"
    loop = find_loop(graph)
    assert loop is None, "import loop: " + " -> ".join(loop)


def test_no_module_imports_inside_a_function():
    found = ["%s:%d: %s" % (os.path.relpath(path, BENCH), line, text)
             for path in sorted(package_modules().values())
             for line, text in imports_in_functions(path)]
    assert not found, "imports inside functions:\n" + "\n".join(found)
