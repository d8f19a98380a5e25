"""The package's ctypes structures and constants against sparkrt_c.h itself:
a C program compiled from the header prints every offset, size, SIZE macro
and enum value, and each must equal what the package declares."""
import ctypes
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import sparkrt
from sparkrt import _structs, comm, ops, testing

SOURCE_ROOT = Path(__file__).resolve().parents[2]
INCLUDES = [SOURCE_ROOT / "capi" / "include", SOURCE_ROOT / "plugins" / "include"]


def _layouts():
    """(C type name, ctypes class, SIZE macro or None)."""
    out = [(c_name, cls, macro) for cls, (c_name, macro) in _structs.HEADER_NAMES.items()]
    out += [
        ("sparkrt_arg", _structs.Arg, None),
        ("SparkrtUniqueId", _structs.UniqueId, None),
        ("SparkrtMockLaunch", testing._MockLaunch, "SPARKRT_MOCK_LAUNCH_SIZE"),
    ]
    return out


def _constants():
    """C expression -> the package's value."""
    c = {"SPARKRT_C_API_MAJOR": sparkrt.API_MAJOR,
         "SPARKRT_LAUNCH_DEPENDENT": _structs.LAUNCH_DEPENDENT}
    c.update({f"SPARKRT_ARG_{k.name}": int(k) for k in sparkrt.ArgKind})
    c.update({f"SPARKRT_PARAM_{t.name}": int(t) for t in sparkrt.ParamType})
    c.update({f"SPARKRT_DTYPE_{t.name}": int(t) for t in comm.DataType})
    c.update({f"SPARKRT_REDUCE_{t.name}": int(t) for t in comm.ReduceOp})
    c.update({f"SPARKRT_CACHE_{t.name}": int(t) for t in ops.CacheFormat})
    c.update({f"SPARKRT_FUSED_K_{t.name}": int(t) for t in ops.FusedKVariant})
    for code in (sparkrt.StatusCode.OK, sparkrt.StatusCode.INVALID_ARGUMENT,
                 sparkrt.StatusCode.NOT_FOUND, sparkrt.StatusCode.FAILED_PRECONDITION,
                 sparkrt.StatusCode.RESOURCE_EXHAUSTED, sparkrt.StatusCode.OUT_OF_RANGE,
                 sparkrt.StatusCode.UNIMPLEMENTED, sparkrt.StatusCode.INTERNAL,
                 sparkrt.StatusCode.UNAVAILABLE):
        c[f"SPARKRT_{code.name}"] = int(code)
    return c


def _program():
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "sparkrt/sparkrt_c.h"',
             '#include "sparkrt/extensions/mock.h"', "int main(void) {"]
    for c_name, cls, macro in _layouts():
        lines.append(f'  printf("{c_name} sizeof %zu\\n", sizeof({c_name}));')
        if macro:
            lines.append(f'  printf("{c_name} SIZE %zu\\n", (size_t)({macro}));')
        for field in cls._fields_:
            name = field[0]
            lines.append(f'  printf("{c_name}.{name} %zu %zu\\n", offsetof({c_name}, {name}), '
                         f'sizeof((({c_name}*)0)->{name}));')
    for name in ("error_code", "error_message", "error_destroy", "reset", "launch_count",
                 "get_launch"):
        lines.append(f'  printf("SparkrtMockExtension.{name} %zu\\n", '
                     f'offsetof(SparkrtMockExtension, {name}));')
    union = _structs.ArgValue
    for field in union._fields_:
        lines.append(f'  printf("sparkrt_arg.value.{field[0]} %zu\\n", '
                     f'sizeof(((sparkrt_arg*)0)->value.{field[0]}));')
    for expr in _constants():
        lines.append(f'  printf("{expr} %lld\\n", (long long)({expr}));')
    lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def header_facts(tmp_path_factory):
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler (set CC) to compile sparkrt_c.h")
    d = tmp_path_factory.mktemp("abi")
    (d / "abi.c").write_text(_program())
    cmd = [cc, "-std=c99", "-Wall", "-Werror", "-o", str(d / "abi"), str(d / "abi.c")]
    cmd += [f"-I{i}" for i in INCLUDES]
    subprocess.run(cmd, check=True)
    out = subprocess.run([str(d / "abi")], check=True, capture_output=True, text=True).stdout
    facts = {}
    for line in out.splitlines():
        words = line.split()
        first_number = next(i for i, w in enumerate(words) if w.lstrip("-").isdigit())
        facts[" ".join(words[:first_number])] = [int(w) for w in words[first_number:]]
    return facts


@pytest.mark.parametrize("c_name,cls,macro", _layouts(), ids=[x[0] for x in _layouts()])
def test_struct_layout_matches_the_header(header_facts, c_name, cls, macro):
    assert header_facts[f"{c_name} sizeof"] == [ctypes.sizeof(cls)]
    for field in cls._fields_:
        name, ctype = field[0], field[1]
        assert header_facts[f"{c_name}.{name}"] == [getattr(cls, name).offset,
                                                    ctypes.sizeof(ctype)], name
    if macro:
        size = header_facts[f"{c_name} SIZE"][0]
        api_size = (cls.api_size() if hasattr(cls, "api_size") else testing._api_size(cls))
        assert api_size == size
        # Tail padding makes sizeof larger than the macro for some structs.
        assert size <= ctypes.sizeof(cls)


def test_arg_union_members(header_facts):
    for name, ctype in _structs.ArgValue._fields_:
        assert header_facts[f"sparkrt_arg.value.{name}"] == [ctypes.sizeof(ctype)], name
    assert ctypes.sizeof(_structs.Arg) == 24


def test_mock_extension_entries(header_facts):
    for name in ("error_code", "error_message", "error_destroy", "reset", "launch_count",
                 "get_launch"):
        assert header_facts[f"SparkrtMockExtension.{name}"] == [
            getattr(testing._MockExtension, name).offset], name


@pytest.mark.parametrize("expr", sorted(_constants()))
def test_constant_matches_the_header(header_facts, expr):
    assert header_facts[expr] == [_constants()[expr]]


def test_ops_cover_every_op_function_of_the_header():
    header = (INCLUDES[0] / "sparkrt" / "sparkrt_c.h").read_text()
    start = header.index("---- KV-cache ops")
    declared = set(re.findall(r"sparkrt_status\*\s+sparkrt_(\w+)\(\s*sparkrt_device\* device,"
                              r"\s*const sparkrt_\w+_args\* args", header[start:]))
    assert declared, "no op declarations found"
    for name in declared:
        assert callable(getattr(ops, name, None)), name
        assert name in ops.__all__


def test_every_header_struct_has_a_layout_check():
    header = (INCLUDES[0] / "sparkrt" / "sparkrt_c.h").read_text()
    macros = set(re.findall(r"#define (SPARKRT_C_\w+_SIZE)\b", header))
    assert macros, "no SIZE macros found"
    checked = {macro for _, _, macro in _layouts() if macro}
    assert macros - checked == set()
