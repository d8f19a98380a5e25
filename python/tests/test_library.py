"""Finding and loading libsparkrt_c, and the errors the package raises.

The lookup tests run a fresh interpreter on a copy of the package laid out
as an install would be, so the copy's own path decides where it looks.
"""
import ctypes
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import sparkrt

PACKAGE = Path(sparkrt.__file__).resolve().parent
LIBRARY = os.environ.get("SPARKRT_C_LIBRARY")


def test_library_loads_with_api_major_1():
    major, minor = sparkrt.c_api_version()
    assert major == sparkrt.API_MAJOR == 1
    assert minor >= 0
    assert sparkrt.version().count(".") == 2
    if LIBRARY:
        assert sparkrt.library_path() == LIBRARY


def test_error_carries_code_name_and_message():
    with pytest.raises(sparkrt.Error) as info:
        sparkrt.Device.open("no-such-backend")
    e = info.value
    assert e.code == sparkrt.StatusCode.NOT_FOUND
    assert e.code_name == "NOT_FOUND"
    assert str(e) == e.message
    assert "backend 'no-such-backend' not found" in e.message
    copy = pickle.loads(pickle.dumps(e))
    assert (copy.code, copy.code_name, copy.message) == (e.code, e.code_name, e.message)


def test_error_out_of_range_device_index():
    with pytest.raises(sparkrt.Error) as info:
        sparkrt.Device.open("cpu", 1000)
    assert info.value.code == sparkrt.StatusCode.OUT_OF_RANGE
    assert "device index 1000 requested" in info.value.message


def _copy_package(dest):
    shutil.copytree(PACKAGE, dest, ignore=shutil.ignore_patterns("__pycache__"))


def _run(package_parent, code, **env):
    """Runs `code` in a fresh interpreter that imports sparkrt from
    package_parent; returns (exit code, stdout + stderr)."""
    full_env = {k: v for k, v in os.environ.items()
                if k not in ("SPARKRT_C_LIBRARY", "LD_LIBRARY_PATH", "PYTHONPATH")}
    full_env.update(PYTHONPATH=str(package_parent), PYTHONDONTWRITEBYTECODE="1", **env)
    # cwd: the script's folder comes first on sys.path and must not hold a
    # sparkrt of its own
    r = subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True,
                       text=True, timeout=120, check=False, cwd=package_parent)
    return r.returncode, r.stdout + r.stderr


PRINT_PATH = "import sparkrt; print(sparkrt.library_path()); print(sparkrt.c_api_version())"
LOAD = "import sparkrt; sparkrt.library()"


def _need_library():
    if not LIBRARY:
        pytest.fail("SPARKRT_C_LIBRARY is not set; the lookup tests link to the built library")


def _installed_tree(tmp_path, libdir):
    prefix = tmp_path / "prefix"
    python_dir = prefix / "share" / "sparkrt" / "python"
    _copy_package(python_dir / "sparkrt")
    (prefix / libdir).mkdir(parents=True)
    (prefix / libdir / "libsparkrt_c.so.0").symlink_to(os.path.realpath(LIBRARY))
    return prefix, python_dir


@pytest.mark.parametrize("libdir", ["lib", "lib64"])
def test_installed_tree_finds_its_library(tmp_path, libdir):
    _need_library()
    prefix, python_dir = _installed_tree(tmp_path, libdir)
    rc, out = _run(python_dir, PRINT_PATH)
    assert rc == 0, out
    assert out.splitlines()[0] == str(prefix / libdir / "libsparkrt_c.so.0")
    assert out.splitlines()[1] == "(1, 0)" or out.splitlines()[1].startswith("(1, ")


def test_installed_tree_uses_the_configured_libdir(tmp_path):
    _need_library()
    prefix, python_dir = _installed_tree(tmp_path, "lib/x86_64-linux-gnu")
    (python_dir / "sparkrt" / "_install_paths.py").write_text(
        'LIBDIR_FROM_PACKAGE = "../../../../lib/x86_64-linux-gnu"\n')
    rc, out = _run(python_dir, PRINT_PATH)
    assert rc == 0, out
    assert out.splitlines()[0] == str(prefix / "lib" / "x86_64-linux-gnu" / "libsparkrt_c.so.0")


def test_missing_library_says_where_it_looked(tmp_path):
    rc, out = _run(tmp_path, "import ctypes; ctypes.CDLL('libsparkrt_c.so.0')")
    if rc == 0:
        pytest.skip("libsparkrt_c.so.0 is installed where the dynamic loader finds it")
    _copy_package(tmp_path / "share" / "sparkrt" / "python" / "sparkrt")
    rc, out = _run(tmp_path / "share" / "sparkrt" / "python", LOAD)
    assert rc != 0
    assert "sparkrt.LibraryError" in out or "LibraryError" in out
    assert str(tmp_path / "lib" / "libsparkrt_c.so.0") + " (no such file)" in out
    assert str(tmp_path / "lib64" / "libsparkrt_c.so.0") + " (no such file)" in out
    assert "libsparkrt_c.so.0 through the dynamic loader" in out
    assert "Set SPARKRT_C_LIBRARY" in out


def test_environment_path_that_does_not_exist(tmp_path):
    missing = tmp_path / "nowhere" / "libsparkrt_c.so.0"
    rc, out = _run(PACKAGE.parent, LOAD, SPARKRT_C_LIBRARY=str(missing))
    assert rc != 0
    assert f"{missing} (no such file)" in out
    assert "Set SPARKRT_C_LIBRARY" in out


def test_import_works_without_the_library(tmp_path):
    code = ("import numpy as np, sparkrt; "
            "print(sparkrt.bf16_from_f32(np.float32(1.5)))")
    rc, out = _run(PACKAGE.parent, code,
                   SPARKRT_C_LIBRARY=str(tmp_path / "libsparkrt_c.so.0"))
    assert rc == 0, out
    assert out.strip() == str(0x3FC0)


def _compiler():
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler (set CC) to build the stand-in libraries")
    return cc


def _shared_library(tmp_path, name, source):
    src = tmp_path / f"{name}.c"
    src.write_text(source)
    out = tmp_path / f"{name}.so"
    subprocess.run([_compiler(), "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
    return out


def test_other_api_major_is_refused(tmp_path):
    fake = _shared_library(tmp_path, "major2", """
        #include <stdint.h>
        uint32_t sparkrt_c_api_version(void) { return (2u << 16) | 7u; }
    """)
    rc, out = _run(PACKAGE.parent, LOAD, SPARKRT_C_LIBRARY=str(fake))
    assert rc != 0
    assert f"{fake} has sparkrt C API 2.7, but this package needs 1.x" in out


def test_a_library_without_the_c_api_is_refused(tmp_path):
    fake = _shared_library(tmp_path, "other", "int unrelated(void) { return 0; }\n")
    rc, out = _run(PACKAGE.parent, LOAD, SPARKRT_C_LIBRARY=str(fake))
    assert rc != 0
    assert f"{fake} is not the sparkrt C library (no sparkrt_c_api_version)" in out


def test_unloadable_file_reports_the_loader_error(tmp_path):
    junk = tmp_path / "libsparkrt_c.so.0"
    junk.write_text("not an ELF file\n")
    rc, out = _run(PACKAGE.parent, LOAD, SPARKRT_C_LIBRARY=str(junk))
    assert rc != 0
    assert f"tried: {junk} (" in out
    with pytest.raises(OSError):
        ctypes.CDLL(str(junk))
