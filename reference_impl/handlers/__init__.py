"""Protocol handlers, one module per Kafka API. Importing the package registers them all."""

import importlib
import pkgutil

for _info in pkgutil.iter_modules(__path__):
    if _info.name != "registry" and not _info.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_info.name}")
