"""A PEP 517 build backend of the standard library alone, for this package.

`pip install ./python` builds the package with it in any python >= 3.8 and
any virtual environment, offline: it needs nothing installed first (no
setuptools, no wheel), so pip's isolated build environment stays empty and
no index is asked. It builds a pure-python wheel of the `scavenger` package
(py3-none-any), an editable wheel (a .pth file naming this directory) and an
sdist, with the metadata of pyproject.toml's [project] table.
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.abspath(__file__))
PACKAGE = "scavenger"


def _project():
    """The [project] table's name, version, description and requires-python,
    and the extras, read off pyproject.toml (tomllib is 3.11's)."""
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    table = re.search(r"^\[project\]\n(.*?)(?=^\[)", text, re.S | re.M).group(1)

    def field(key):
        m = re.search(r'^%s\s*=\s*"([^"]*)"' % re.escape(key), table, re.M)
        return m.group(1) if m else ""

    extras = {}
    opt = re.search(r"^\[project\.optional-dependencies\]\n(.*?)(?=^\[|\Z)", text, re.S | re.M)
    if opt:
        for name, deps in re.findall(r"^(\w[\w-]*)\s*=\s*\[([^\]]*)\]", opt.group(1), re.M):
            extras[name] = re.findall(r'"([^"]+)"', deps)
    return {"name": field("name"), "version": field("version"), "summary": field("description"),
            "requires_python": field("requires-python"), "extras": extras}


def _dist_info(p):
    return "%s-%s.dist-info" % (p["name"], p["version"])


def _metadata(p):
    lines = ["Metadata-Version: 2.1", "Name: " + p["name"], "Version: " + p["version"],
             "Summary: " + p["summary"], "Requires-Python: " + p["requires_python"]]
    for extra, deps in sorted(p["extras"].items()):
        lines.append("Provides-Extra: " + extra)
        lines += ['Requires-Dist: %s; extra == "%s"' % (d, extra) for d in deps]
    lines.append("Description-Content-Type: text/markdown")
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        return "\n".join(lines) + "\n\n" + f.read()


_WHEEL = "Wheel-Version: 1.0\nGenerator: scavenger build_backend\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _package_files():
    """(archive name, path) of every file of the package, no caches."""
    out = []
    for d, dirs, files in os.walk(os.path.join(ROOT, PACKAGE)):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        for name in sorted(files):
            if name.endswith((".pyc", ".pyo")):
                continue
            path = os.path.join(d, name)
            out.append((os.path.relpath(path, ROOT).replace(os.sep, "/"), path))
    return out


def _write_wheel(wheel_directory, entries):
    """Write a wheel of entries ((name, bytes)) and its RECORD; return its file name."""
    p = _project()
    info = _dist_info(p)
    entries = entries + [(info + "/METADATA", _metadata(p).encode()), (info + "/WHEEL", _WHEEL.encode()),
                         (info + "/top_level.txt", (PACKAGE + "\n").encode())]
    record = []
    name = "%s-%s-py3-none-any.whl" % (p["name"], p["version"])
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in entries:
            z.writestr(arc, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append("%s,sha256=%s,%d" % (arc, digest, len(data)))
        record.append(info + "/RECORD,,")
        z.writestr(info + "/RECORD", "\n".join(record) + "\n")
    return name


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    p = _project()
    info = os.path.join(metadata_directory, _dist_info(p))
    os.makedirs(info, exist_ok=True)
    for name, text in (("METADATA", _metadata(p)), ("WHEEL", _WHEEL)):
        with open(os.path.join(info, name), "w", encoding="utf-8") as f:
            f.write(text)
    return _dist_info(p)


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [(arc, _read(path)) for arc, path in _package_files()])


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [("_scavenger_editable.pth", (ROOT + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    p = _project()
    base = "%s-%s" % (p["name"], p["version"])
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as t:
        for rel in ("pyproject.toml", "README.md", "build_backend.py"):
            t.add(os.path.join(ROOT, rel), base + "/" + rel)
        for arc, path in _package_files():
            t.add(path, base + "/" + arc)
        info = tarfile.TarInfo(base + "/PKG-INFO")
        data = _metadata(p).encode()
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return name
