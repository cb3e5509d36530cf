from setuptools import find_packages, setup

# twisted/plugins has no __init__.py (Twisted's plugin directories must not),
# so it is listed by hand: `twistd natsbroker` finds our ServiceMaker there.
setup(
    packages=find_packages(include=["natsbroker", "natsbroker.*", "plugins", "plugins.*"])
    + ["twisted.plugins"],
    package_data={"twisted.plugins": ["natsbroker_plugin.py"]},
)
