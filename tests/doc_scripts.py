"""The analysis scripts of docs/analysis (not a package) imported as modules, for their tests."""
import importlib.util
import pathlib
from types import ModuleType

FOLDER = pathlib.Path(__file__).resolve().parents[1] / "docs" / "analysis"


def load(name: str) -> ModuleType:
    """``docs/analysis/NAME.py`` as a module named NAME."""
    spec = importlib.util.spec_from_file_location(name, FOLDER / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
