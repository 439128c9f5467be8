"""The scheduling policies, one module each; importing this package registers all of them.

A new policy is a module here with a `@register_policy` class: it is found automatically.
"""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_") and _module.name != "placement":
        importlib.import_module(f"{__name__}.{_module.name}")
