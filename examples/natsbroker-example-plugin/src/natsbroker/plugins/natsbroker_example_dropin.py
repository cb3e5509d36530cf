"""The drop-in module that makes natsbroker load the example plugin.

natsbroker scans every ``natsbroker/plugins`` directory on ``sys.path`` (the
directory has no ``__init__.py``, like ``twisted/plugins``) for objects
providing ``natsbroker.interfaces.IBrokerPluginFactory``. Keep this module
small: it is imported by every server in the environment, so the plugin's
code lives in its own package.
"""

from natsbroker_example.plugin import factory as example  # noqa: F401
