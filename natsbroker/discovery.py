"""Finding and loading broker plugins.

Plugins are found through Twisted's plugin system in the ``natsbroker.plugins``
drop-in package (objects providing IBrokerPluginFactory), and by
``module:object`` names from the configuration.
"""

import importlib
import sys

from twisted.plugin import IPlugin, getPlugins
from twisted.python.modules import getModule
from zope.interface import implementer

from natsbroker.interfaces import IBrokerPlugin, IBrokerPluginFactory


@implementer(IPlugin, IBrokerPluginFactory)
class PluginFactory:
    """Factory for a plugin class taking ``(config)``.

    ``enabled(config)`` decides whether the server gets the plugin at all.
    """

    def __init__(self, name, plugin_class, order=100, enabled=None, config_block=None):
        self.name = name
        self.order = order
        self.config_block = config_block
        self._class = plugin_class
        self._enabled = enabled

    def make_plugin(self, config):
        if self._enabled is not None and not self._enabled(config):
            return None
        return self._class(config)

    def __repr__(self):
        return "<PluginFactory %s>" % self.name


def discover():
    """Every IBrokerPluginFactory in the ``natsbroker.plugins`` drop-in package.

    Raises :class:`PluginLoadError` for a drop-in module that cannot be
    imported: a server without a plugin its operator installed must not
    start (Twisted's ``getPlugins`` would log the traceback and go on)."""
    # Imported here: the built-in plugins import the core, never the other way.
    from natsbroker import plugins as dropin
    _import_dropins(dropin)
    return list(getPlugins(IBrokerPluginFactory, dropin))


def _import_dropins(package):
    # Every module getPlugins would load, imported first (once per process:
    # then getPlugins finds them in sys.modules).
    for module in getModule(package.__name__).iterModules():
        if module.name in sys.modules:
            continue
        try:
            module.load()
        except Exception as e:
            sys.modules.pop(module.name, None)
            raise PluginLoadError("cannot load plugin %s (%s): %s: %s" % (
                module.name, module.filePath.path, type(e).__name__, e)) from None


class PluginLoadError(ValueError):
    pass


def config_blocks(specs=()):
    """The top-level config file blocks plugins claim: the ``config_block``
    of every drop-in factory and of the plugins named by ``specs``
    (``module:object``), lower case."""
    objects = list(discover()) + [_named(spec) for spec in specs]
    return {b.lower() for b in (getattr(o, "config_block", None) for o in objects) if b}


def _named(spec):
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise PluginLoadError("plugin %r is not of the form module:object" % spec)
    try:
        obj = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise PluginLoadError("cannot load plugin %r: %s" % (spec, e))
    return obj


def load_named(spec, config):
    """Load ``module:object`` as a plugin: a factory, a class, or an instance."""
    obj = _named(spec)
    if IBrokerPluginFactory.providedBy(obj):
        return obj.make_plugin(config)
    if IBrokerPlugin.providedBy(obj):
        return obj
    if isinstance(obj, type) and IBrokerPlugin.implementedBy(obj):
        return obj(config)
    raise PluginLoadError("%r provides neither IBrokerPluginFactory nor IBrokerPlugin" % spec)


def plugins_for(config):
    """The plugin instances a server with ``config`` runs, in start order."""
    made = []
    for factory in sorted(discover(), key=lambda f: (f.order, f.name)):
        plugin = factory.make_plugin(config)
        if plugin is not None:
            made.append(plugin)
    for spec in config.plugins:
        plugin = load_named(spec, config)
        if plugin is not None:
            made.append(plugin)
    names = set()
    for p in made:
        if p.name in names:
            raise PluginLoadError("two plugins are named %r" % p.name)
        names.add(p.name)
    return made
