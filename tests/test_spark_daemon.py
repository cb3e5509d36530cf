"""spark/daemon.py: the Python workers' daemon takes Spark's pyspark.zip and
py4j source zip off the path only when the installed packages are the same
releases (tests/test_spark_ingest.py checks the workers of a real session)."""

import os
import sys
import zipfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from natsbroker.spark.daemon import installed_path  # noqa: E402


def _installed(root, package, version):
    d = root / package
    d.mkdir(parents=True)
    (d / "__init__.py").write_text("")
    (d / "version.py").write_text("__version__: str = '%s'\n" % version)
    return str(root)


def _zipped(path, package, version):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(package + "/__init__.py", "")
        z.writestr(package + "/version.py", "__version__ = '%s'\n" % version)
    return str(path)


@pytest.fixture
def layout(tmp_path):
    site = _installed(tmp_path / "site", "pyspark", "4.3.0")
    _installed(tmp_path / "site", "py4j", "0.10.9.9")
    lib = tmp_path / "spark" / "python" / "lib"
    lib.mkdir(parents=True)
    return tmp_path, site, lib


def test_same_releases_drop_the_zips(layout):
    _, site, lib = layout
    a = _zipped(lib / "pyspark.zip", "pyspark", "4.3.0")
    b = _zipped(lib / "py4j-0.10.9.9-src.zip", "py4j", "0.10.9.9")
    assert installed_path([a, b, "/x", site]) == ["/x", site]


@pytest.mark.parametrize("which", ["pyspark", "py4j"])
def test_another_release_keeps_the_path(layout, which):
    _, site, lib = layout
    a = _zipped(lib / "pyspark.zip", "pyspark", "4.2.9" if which == "pyspark" else "4.3.0")
    b = _zipped(lib / "py4j-0.10.9.9-src.zip", "py4j",
                "0.10.9.8" if which == "py4j" else "0.10.9.9")
    path = [a, b, site]
    assert installed_path(path) is path


def test_nothing_installed_or_a_bad_zip_keeps_the_path(layout, tmp_path):
    _, site, lib = layout
    a = _zipped(lib / "pyspark.zip", "pyspark", "4.3.0")
    assert installed_path([a, str(tmp_path / "empty")]) == [a, str(tmp_path / "empty")]
    bad = lib / "py4j-0.10.9.9-src.zip"
    bad.write_bytes(b"not a zip")
    path = [a, str(bad), site]
    assert installed_path(path) is path


def test_no_zips_no_change():
    path = ["/a", "/b"]
    assert installed_path(path) is path
