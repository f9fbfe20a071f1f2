"""A PEP 517 build backend for the gpreempt package, standard library only.

It writes a wheel holding gpreempt/__init__.py and, when one is found at
build time, libgpreempt.so beside it: $GPREEMPT_LIB, else the repository's
bin/libgpreempt.so (``make build``). Without one the wheel is pure Python
and the package looks for the library at run time (GPREEMPT_LIB, the
repository's bin/, the loader's path).
"""

import base64
import hashlib
import io
import os
import tarfile
import zipfile

NAME = "gpreempt"
VERSION = "0.1.0"
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIST_INFO = f"{NAME}-{VERSION}.dist-info"
METADATA = f"""Metadata-Version: 2.1
Name: {NAME}
Version: {VERSION}
Summary: Pre-preemption for latency-critical CUDA requests (ctypes wrapper of libgpreempt.so)
Requires-Python: >=3.8
License: Apache-2.0
"""


def _library():
    for c in (os.environ.get("GPREEMPT_LIB"), os.path.join(HERE, "..", "bin", "libgpreempt.so")):
        if c and os.path.isfile(c):
            return c
    return None


def _tag(lib):
    if not lib:
        return "py3-none-any"
    machine = os.uname().machine
    return f"py3-none-linux_{machine}"


def _record_line(arc, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arc},sha256={digest},{len(data)}"


def _write_wheel(wheel_directory, files):
    lib = _library()
    tag = _tag(lib)
    if lib:
        with open(lib, "rb") as f:
            files[f"{NAME}/libgpreempt.so"] = f.read()
    files[f"{DIST_INFO}/METADATA"] = METADATA.encode()
    files[f"{DIST_INFO}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: gpreempt_build\nRoot-Is-Purelib: {'false' if lib else 'true'}\nTag: {tag}\n"
    ).encode()
    name = f"{NAME}-{VERSION}-{tag}.whl"
    record = [_record_line(arc, data) for arc, data in files.items()]
    record.append(f"{DIST_INFO}/RECORD,,")
    files[f"{DIST_INFO}/RECORD"] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in files.items():
            info = zipfile.ZipInfo(arc, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if arc.endswith(".so") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    with open(os.path.join(HERE, NAME, "__init__.py"), "rb") as f:
        return _write_wheel(wheel_directory, {f"{NAME}/__init__.py": f.read()})


def build_sdist(sdist_directory, config_settings=None):
    base = f"{NAME}-{VERSION}"
    name = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in ("pyproject.toml", "README.md", f"{NAME}/__init__.py", "_build/gpreempt_build.py"):
            t.add(os.path.join(HERE, rel), arcname=f"{base}/{rel}")
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        data = METADATA.encode()
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return name
