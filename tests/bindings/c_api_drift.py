#!/usr/bin/env python3
"""The C API's mirrors agree with it: core/dtype.h's dtype rows, api/dtensor/c_api.h (with dlpack.h's structs), and
the Python package's ctypes declarations (bindings/python/dtensor/_lib.py, the status codes of errors.py).

Everything is parsed, nothing is loaded or compiled, and every difference is named: an enumerator missing on one side
or with another value, a struct field of another name, type or position, a function missing on one side or with other
argument or return types. Then the check is shown to bite: one-sided edits of the real texts (a dtype code changed in
c_api.h only, an argument dropped in _lib.py, a field renamed, a function added to the header only, a dtype row
added to core/dtype.h only) must each be reported.

    c_api_drift.py SOURCE_ROOT
"""
import ast
import re
import sys

DTYPE_ROW = re.compile(r'X\((\w+), ([\w:]+), "([^"]*)", (true|false), "([^"]*)", (\w+), (\d+), (\w+), "([^"]*)", '
                       r'(\w+)\)')
C_INTS = {"int8_t": "c_int8", "int32_t": "c_int32", "int64_t": "c_int64", "uint8_t": "c_uint8", "uint16_t": "c_uint16",
          "uint32_t": "c_uint32", "uint64_t": "c_uint64", "size_t": "c_size_t", "double": "c_double", "void": "None"}


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def python_struct_name(c_name):
    """dt_nccl_adopt_params_t -> NcclAdoptParams; DLTensor stays DLTensor."""
    if not c_name.startswith("dt_"):
        return c_name
    return "".join(part.capitalize() for part in c_name[3:-2].split("_"))


class CHeader:
    """Enums, structs, handle types and DT_API functions of c_api.h + dlpack.h."""

    def __init__(self, *texts):
        text = "\n".join(strip_comments(t) for t in texts)
        self.enums = {}        # enumerator -> value
        self.enum_types = set()
        for m in re.finditer(r"(typedef\s+)?enum\s*(\w*)\s*\{([^}]*)\}\s*(\w*)\s*;", text):
            self.enum_types.update(n for n in (m.group(2), m.group(4)) if n)
            for item in m.group(3).split(","):
                if item.strip():
                    name, _, value = item.partition("=")
                    self.enums[name.strip()] = int(value.strip().rstrip("uUlL"), 0)
        self.handles = set(re.findall(r"typedef\s+struct\s+\w+\s*\*\s*(\w+)\s*;", text))
        self.structs = {}      # Python class name -> [(field, ctypes type)]
        bodies = re.findall(r"typedef\s+struct\s*\w*\s*\{([^}]*)\}\s*(\w+)\s*;", text)
        self.struct_names = {c: python_struct_name(c) for _, c in bodies}
        for body, c_name in bodies:
            self.structs[self.struct_names[c_name]] = [f for decl in body.split(";") if decl.strip()
                                                       for f in self.fields(decl)]
        self.functions = {}    # name -> (return ctypes type, [argument ctypes types])
        for ret, name, args in re.findall(r"DT_API\s+([\w\s\*]+?)\s*\b(\w+)\s*\(([^)]*)\)\s*;", text):
            params = [] if args.strip() in ("", "void") else [self.param_type(a) for a in args.split(",")]
            self.functions[name] = (self.ctype(ret), params)

    def ctype(self, decl):
        """The ctypes spelling of a C type ("const char* const*" -> POINTER(c_char_p))."""
        decl = re.sub(r"\b(const|struct)\b", " ", decl)
        stars = decl.count("*")
        base = decl.replace("*", " ").split()[0]
        if base == "char" and stars:
            out, stars = "c_char_p", stars - 1
        elif base == "void" and stars:
            out, stars = "c_void_p", stars - 1
        elif base in self.handles:
            out = "c_void_p"
        elif base in self.enum_types:
            out = "c_int32"
        else:
            out = C_INTS.get(base) or self.struct_names.get(base) or python_struct_name(base)
        for _ in range(stars):
            out = f"POINTER({out})"
        return out

    def param_type(self, decl):
        """A parameter's type: the declaration without its name."""
        decl = decl.strip()
        name = re.search(r"(\w+)\s*$", decl)
        return self.ctype(decl[:name.start()] if name and len(decl[:name.start()].strip()) else decl)

    def fields(self, decl):
        decl = " ".join(decl.split())
        fn = re.match(r"(.+?)\(\s*\*\s*(\w+)\s*\)\s*\((.*)\)$", decl)
        if fn:  # a function pointer field
            args = [] if fn.group(3).strip() in ("", "void") else [self.param_type(a) for a in fn.group(3).split(",")]
            return [(fn.group(2), f"CFUNCTYPE({', '.join([self.ctype(fn.group(1))] + args)})")]
        first, *more = decl.split(",")
        m = re.match(r"(.*?)(\w+)$", first.strip())
        base = m.group(1).replace("*", "")
        out = [(m.group(2), self.ctype(m.group(1)))]
        for extra in more:  # int64_t a, b, c;
            stars, name = re.match(r"\s*(\**)\s*(\w+)", extra).groups()
            out.append((name, self.ctype(base + stars)))
        return out


class PythonMirror:
    """The declarations of _lib.py (structs, constants, the two function tables) and errors.py's status classes."""

    def __init__(self, lib_text, errors_text):
        tree = ast.parse(lib_text)
        self.aliases = {"_h": "c_void_p"}
        self.structs, self.constants, self.tables = {}, {}, {}
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.Assign) and item.targets[0].id == "_fields_":
                        self.structs[node.name] = self.field_list(item.value)
                self.structs.setdefault(node.name, [])
            elif isinstance(node, ast.Assign):
                target = node.targets[0]
                if isinstance(target, ast.Attribute) and target.attr == "_fields_":
                    self.structs[target.value.id] = self.field_list(node.value)
                elif (isinstance(target, ast.Name) and isinstance(node.value, ast.Call)
                      and getattr(node.value.func, "id", "") in ("CFUNCTYPE", "POINTER")):
                    self.aliases[target.id] = self.type_of(node.value)
                elif isinstance(target, ast.Name) and isinstance(node.value, ast.Dict):
                    self.tables[target.id] = node.value
                elif isinstance(target, (ast.Name, ast.Tuple)):
                    names = [target] if isinstance(target, ast.Name) else target.elts
                    values = [node.value] if isinstance(target, ast.Name) else getattr(node.value, "elts", [])
                    for n, v in zip(names, values):
                        if isinstance(v, ast.Constant) and isinstance(v.value, int):
                            self.constants[n.id] = v.value
        self.functions = {}
        for key, value in zip(self.tables["_SIGNATURES"].keys, self.tables["_SIGNATURES"].values):
            self.functions[key.value] = ("c_int32", [self.type_of(e) for e in value.elts])
        for key, value in zip(self.tables["_RESTYPES"].keys, self.tables["_RESTYPES"].values):
            ret, args = value.elts
            self.functions[key.value] = (self.type_of(ret), [self.type_of(e) for e in args.elts])
        self.statuses = {}  # status name -> code
        for node in ast.parse(errors_text).body:
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if (isinstance(item, ast.Assign) and isinstance(item.targets[0], ast.Tuple)
                            and [t.id for t in item.targets[0].elts] == ["status", "status_name"]):
                        code, name = (e.value for e in item.value.elts)
                        self.statuses[name] = code

    def type_of(self, node):
        if isinstance(node, ast.Constant) and node.value is None:
            return "None"
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, "POINTER" if node.id == "_p" else node.id)
        if isinstance(node, ast.Call):
            fn = node.func.id
            args = [self.type_of(a) for a in node.args]
            if fn in ("_p", "POINTER"):
                return f"POINTER({args[0]})"
            return f"{fn}({', '.join(args)})"
        raise ValueError(f"_lib.py: cannot read the type {ast.dump(node)}")

    def field_list(self, node):
        return [(e.elts[0].value, self.type_of(e.elts[1])) for e in node.elts]

    def table(self, name):
        node = self.tables[name]
        return {k.value: v.value for k, v in zip(node.keys, node.values)}


def dtype_rows(dtype_h):
    rows = DTYPE_ROW.findall(dtype_h)
    return [{"enum": r[0], "long": r[4], "c": "DT_" + r[5], "code": int(r[6]), "dl": "kDL" + r[7], "st": r[8]}
            for r in rows]


def check(dtype_h, c_api_h, dlpack_h, lib_py, errors_py):
    """Every difference, as a list of lines."""
    out = []
    c = CHeader(c_api_h, dlpack_h)
    py = PythonMirror(lib_py, errors_py)
    rows = dtype_rows(dtype_h)
    if not rows:
        return ["core/dtype.h: no rows of DT_FOR_EACH_DTYPE could be read"]

    # The dtype rows against c_api.h's dt_dtype_t and dlpack.h's codes.
    dtype_enum = {k: v for k, v in c.enums.items() if k in {r["c"] for r in rows} or
                  (re.match(r"DT_(FLOAT|BFLOAT|INT|UINT|BOOL)", k) and not k.startswith("DT_INIT"))}
    for r in rows:
        if r["c"] not in c.enums:
            out.append(f"dtype {r['enum']}: core/dtype.h names C code {r['c']} = {r['code']}; c_api.h has no {r['c']}")
        elif c.enums[r["c"]] != r["code"]:
            out.append(f"dtype {r['enum']}: core/dtype.h says {r['c']} = {r['code']}, c_api.h says {c.enums[r['c']]}")
        if r["dl"] not in c.enums:
            out.append(f"dtype {r['enum']}: DLPack code {r['dl']} is not in dlpack.h")
    for name, value in dtype_enum.items():
        if name not in {r["c"] for r in rows}:
            out.append(f"dt_dtype_t {name} = {value} (c_api.h) has no row in core/dtype.h")
    for what, key in (("C code", "code"), ("long name", "long"), ("safetensors name", "st")):
        seen = [r[key] for r in rows]
        for v in sorted({v for v in seen if seen.count(v) > 1}, key=str):
            out.append(f"core/dtype.h: {what} {v} is in more than one row")

    # Every enumerator of c_api.h has its Python mirror, with the same value, and nothing more.
    mirror = {("DT_OK" if k == "OK" else "DT_" + k if k.startswith("PARAM_") else k): v
              for k, v in py.constants.items() if k == "OK" or k.startswith(("DT_", "PARAM_"))}
    long_to_c = {r["long"]: r["c"] for r in rows}
    for long_name, code in py.table("DTYPE_CODES").items():
        mirror[long_to_c.get(long_name, f"(a dtype named {long_name!r})")] = code
    for op, code in py.table("REDUCE_OPS").items():
        mirror["DT_REDUCE_" + op.upper()] = code
    mirror.update(py.statuses)
    c_enums = {k: v for k, v in c.enums.items() if k.startswith("DT_")}
    for name in sorted(set(c_enums) | set(mirror)):
        if name not in mirror:
            out.append(f"{name} = {c_enums[name]} (c_api.h) has no mirror in the Python package")
        elif name not in c_enums:
            out.append(f"{name} = {mirror[name]} (Python package) is not in c_api.h")
        elif c_enums[name] != mirror[name]:
            out.append(f"{name}: c_api.h says {c_enums[name]}, the Python package says {mirror[name]}")

    # Structs: every dt_ struct mirrored; every Python Structure as in the header, field by field.
    for name in sorted(set(c.structs) | set(py.structs)):
        if name not in py.structs:
            if not name.startswith("DL"):
                out.append(f"struct {name} (c_api.h) has no ctypes Structure in _lib.py")
            continue
        if name not in c.structs:
            out.append(f"_lib.py Structure {name} is not a struct of c_api.h or dlpack.h")
            continue
        if c.structs[name] != py.structs[name]:
            out.append(f"struct {name}: c_api.h has {c.structs[name]}, _lib.py has {py.structs[name]}")

    # Functions: the same set, the same types.
    for name in sorted(set(c.functions) | set(py.functions)):
        if name not in py.functions:
            out.append(f"function {name} (c_api.h) is not declared in _lib.py")
        elif name not in c.functions:
            out.append(f"function {name} (_lib.py) is not in c_api.h")
        elif c.functions[name] != py.functions[name]:
            (cr, ca), (pr, pa) = c.functions[name], py.functions[name]
            out.append(f"function {name}: c_api.h returns {cr} and takes {ca}; _lib.py returns {pr} and takes {pa}")
    return out


def bites(texts):
    """One-sided edits of the real texts; each must be reported (what, edited texts, a phrase of the report)."""
    dtype_h, c_api_h, dlpack_h, lib_py, errors_py = texts
    edits = [
        ("a dtype code changed in c_api.h only", (dtype_h, c_api_h.replace("DT_INT64 = 6", "DT_INT64 = 9"), dlpack_h,
                                                  lib_py, errors_py), "DT_INT64 = 6, c_api.h says 9"),
        ("a dtype code changed in _lib.py only", (dtype_h, c_api_h, dlpack_h, lib_py.replace('"int64": 6', '"int64": 7'),
                                                  errors_py), "DT_INT64: c_api.h says 6, the Python package says 7"),
        ("a dtype row added to core/dtype.h only",
         (dtype_h.replace('  X(b8, bool,', '  X(u16, uint16_t, "u16", false, "uint16", UINT16, 9, UInt, "U16", '
                          'Uint16) \\\n  X(b8, bool,'), c_api_h, dlpack_h, lib_py, errors_py), "c_api.h has no DT_UINT16"),
        ("an argument dropped in _lib.py", (dtype_h, c_api_h, dlpack_h,
                                            lib_py.replace('"dt_comm_rank": [_h, _p(c_int32)]', '"dt_comm_rank": [_h]'),
                                            errors_py), "function dt_comm_rank"),
        ("a field renamed in c_api.h", (dtype_h, c_api_h.replace("int32_t may_abort;", "int32_t can_abort;"), dlpack_h,
                                        lib_py, errors_py), "struct NcclAdoptParams"),
        ("a function added to c_api.h only", (dtype_h, c_api_h.replace(
            "DT_API dt_status_t dt_comm_barrier(", "DT_API dt_status_t dt_comm_split(dt_comm_t c, int32_t color);\n"
            "DT_API dt_status_t dt_comm_barrier("), dlpack_h, lib_py, errors_py), "dt_comm_split (c_api.h) is not"),
        ("a status code changed in errors.py only", (dtype_h, c_api_h, dlpack_h, lib_py,
                                                     errors_py.replace('2, "DT_ERR_UNSUPPORTED"', '9, "DT_ERR_UNSUPPORTED"')),
         "DT_ERR_UNSUPPORTED: c_api.h says 2"),
    ]
    failures = []
    for what, edited, phrase in edits:
        if edited == texts:
            failures.append(f"self-test '{what}': the edit did not apply (the text it edits changed): update it")
            continue
        report = check(*edited)
        if not any(phrase in line for line in report):
            failures.append(f"self-test '{what}': not reported (wanted '{phrase}'; got {report})")
    return failures, len(edits)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    paths = ["core/dtype.h", "api/dtensor/c_api.h", "api/dtensor/dlpack.h", "bindings/python/dtensor/_lib.py",
             "bindings/python/dtensor/errors.py"]
    texts = tuple(open(f"{root}/{p}").read() for p in paths)
    drift = check(*texts)
    for line in drift:
        print("drift:", line)
    failures, n = bites(texts)
    for line in failures:
        print("FAIL:", line)
    c = CHeader(texts[1], texts[2])
    print(f"c_api drift: {len(c.functions)} functions, {len(c.structs)} structs, {len(c.enums)} enumerators, "
          f"{len(dtype_rows(texts[0]))} dtype rows compared: {len(drift)} difference(s); {n - len(failures)}/{n} "
          f"one-sided edits caught")
    return 1 if drift or failures else 0


if __name__ == "__main__":
    sys.exit(main())
