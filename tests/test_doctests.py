"""Every docstring example in the package runs and prints what it shows.

DESIGN.md asks for a short example in every public docstring; examples that
are not run rot (an import dropped by a lint fix, a default that changed).
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import goodput_jax

MODULES = sorted(
    m.name for m in pkgutil.walk_packages(goodput_jax.__path__, "goodput_jax.")
    if not m.name.endswith("__main__"))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in finder.find(module, name, globs=vars(module).copy()):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
