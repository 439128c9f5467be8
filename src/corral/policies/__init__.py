"""The scheduling policies; importing this package registers all of them.

A policy is a module here (or a subpackage, for a policy of several modules, whose
`__init__` imports the module that registers it) with a `@register_policy` class: it is found
automatically.
"""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_") and _module.name != "placement":
        importlib.import_module(f"{__name__}.{_module.name}")
