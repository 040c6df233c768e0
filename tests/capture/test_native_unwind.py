"""capture/native.py: its CFI rows against binutils' own interpretation (readelf
--debug-dump=frames-interp), its symbols against nm, the op layer's names, and a raw capture's
native paths resolved without the libraries they ran."""
from __future__ import annotations

import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from zym.capture import native

HERE = Path(__file__).resolve().parent
FAKETORCH = HERE.parent / "ebpf" / "faketorch.cpp"
REGS = {"rax": 0, "rdx": 1, "rcx": 2, "rbx": 3, "rsi": 4, "rdi": 5, "rbp": 6, "rsp": 7,
        **{f"r{i}": i for i in range(8, 16)}, "ra": 16}
LIBC = next((p for p in ("/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib64/libc.so.6")
             if Path(p).exists()), None)

needs_binutils = pytest.mark.skipif(shutil.which("readelf") is None or shutil.which("g++") is None,
                                    reason="needs readelf and g++ (binutils)")


@pytest.fixture(scope="module")
def faketorch(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("faketorch")
    (d / "stub.c").write_text("int cudaLaunchKernel(void){return 0;}\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(d / "libcudart.so.12"),
                    str(d / "stub.c")], check=True)
    out = d / "libfaketorch.so"
    subprocess.run(["g++", "-shared", "-fPIC", "-O2", "-fomit-frame-pointer", "-o", str(out),
                    str(FAKETORCH), str(d / "libcudart.so.12")], check=True)
    return out


def readelf_rows(path: Path) -> list[tuple[int, str, dict[str, str]]]:
    """(location, CFA, {register: rule}) of every row readelf interprets."""
    text = subprocess.run(["readelf", "--debug-dump=frames-interp", str(path)],
                          capture_output=True, text=True, check=False).stdout
    rows, header, in_fde = [], None, False
    for line in text.splitlines():
        if " FDE " in line or " CIE " in line:
            header, in_fde = None, " FDE " in line
        elif line.strip().startswith("LOC") and in_fde:
            header = line.split()[2:]
        elif header and re.match(r"^[0-9a-f]{16} ", line):
            cols = line.split()
            rows.append((int(cols[0], 16), cols[1], dict(zip(header, cols[2:]))))
    return rows


def check_rows(path: Path, sample: int | None) -> int:
    elf = native.ElfUnwind(str(path))
    rows = readelf_rows(path)
    if sample is not None and len(rows) > sample:
        rows = random.Random(7).sample(rows, sample)
    checked = 0
    for loc, cfa, regs in rows:
        m = re.fullmatch(r"(r\w+)\+(\d+)", cfa)
        if m is None:
            continue     # a CFA expression (PLT stubs): zym does not follow those
        row = elf.row_at(loc)
        assert row is not None, hex(loc)
        assert (row.cfa_reg, row.cfa_off) == (REGS[m[1]], int(m[2])), (hex(loc), cfa, row)
        for name, rule in regs.items():
            reg = REGS[name]
            if rule.startswith("c-"):
                assert row.offsets.get(reg) == -int(rule[2:]), (hex(loc), name, rule, row)
            elif rule == "u":
                assert reg not in row.offsets, (hex(loc), name, row)
        checked += 1
    return checked


@needs_binutils
def test_cfi_rows_agree_with_readelf_on_a_library_without_frame_pointers(faketorch):
    assert check_rows(faketorch, None) >= 20


@needs_binutils
@pytest.mark.skipif(LIBC is None, reason="no libc.so.6 at the usual paths")
def test_cfi_rows_agree_with_readelf_on_libc():
    assert check_rows(Path(LIBC), 400) >= 300


@needs_binutils
def test_symbols_agree_with_nm(faketorch):
    elf = native.ElfUnwind(str(faketorch))
    out = subprocess.run(["nm", "--defined-only", str(faketorch)], capture_output=True,
                         text=True, check=True).stdout
    funcs = [(int(a, 16), n) for a, t, n in (ln.split() for ln in out.splitlines()
                                              if len(ln.split()) == 3) if t in "Tt"]
    assert len(funcs) >= 10
    for addr, name in funcs:
        assert elf.symbol(addr + 1) == (name, addr) or elf.symbol(addr)[1] == addr, name


def test_demangle_and_the_op_layer():
    assert native.demangle("_ZN2at4_ops5addmm4callERKNS_6TensorE") == \
        "at::_ops::addmm::call(at::Tensor const&)"
    assert native.demangle("cuLaunchKernel") == "cuLaunchKernel"
    # torchgen names the struct <op>_<overload> (native_functions.yaml: "add.Tensor",
    # "sum.dim_IntList", "to.dtype", "add_.Tensor", "copy_"); Kineto shows the op without it
    cases = {"addmm": "aten::addmm", "add_Tensor": "aten::add", "sum_dim_IntList": "aten::sum",
             "to_dtype": "aten::to", "add__Tensor": "aten::add_", "copy_": "aten::copy_",
             "_addmm_activation": "aten::_addmm_activation", "mm": "aten::mm",
             "scaled_dot_product_attention": "aten::scaled_dot_product_attention",
             "where_self": "aten::where", "select_int": "aten::select",
             "index_select": "aten::index_select", "split_with_sizes": "aten::split_with_sizes"}
    for struct, op in cases.items():
        assert native.torch_op(f"at::_ops::{struct}::call(at::Tensor const&)") == op
        assert native.torch_op(f"at::_ops::{struct}::redispatch(c10::DispatchKeySet)") == op
    assert native.torch_op("at::native::addmm_out_cuda(int)") is None
    assert native.torch_op("at::_ops::addmm::schema()") is None


def test_long_names_lose_their_template_arguments_first():
    name = ("c10::impl::wrap_kernel_functor_unboxed_<c10::impl::detail::WrapFunctionIntoFunctor_<"
            + "x" * 300 + ">>::call(c10::OperatorKernel*, c10::DispatchKeySet, at::Tensor const&)")
    short = native.shorten(name)
    assert short == ("c10::impl::wrap_kernel_functor_unboxed_<…>::call(c10::OperatorKernel*, "
                     "c10::DispatchKeySet, at::Tensor const&)")
    assert native.shorten("f(int)") == "f(int)"


@needs_binutils
def test_unwinding_stops_where_the_copy_ends(faketorch):
    """A return address beyond the copied bytes ends the walk with its reason, never a guess."""
    elf = native.ElfUnwind(str(faketorch))
    out = subprocess.run(["nm", "--defined-only", str(faketorch)], capture_output=True,
                         text=True, check=True).stdout
    addr = next(int(a, 16) for a, t, n in (ln.split() for ln in out.splitlines()
                                            if len(ln.split()) == 3) if "addmm_out_cuda" in n)
    base = 0x7F0000000000
    m = native.Mapping(base, base + 0x100000, 0, str(faketorch))
    frames, why = native.unwind(base + addr, 0x1000, 0, b"", [m], native.Images())
    assert [f.vaddr for f in frames] == [elf.vaddr_of_offset(addr)]
    assert why == "stack copy too short"


def test_restore_state_brings_back_a_cfa_expression():
    """GCC's stack realignment (DRAP): the CFA is an expression; before an epilogue the row
    is remembered, the epilogue redefines the CFA as r10+0, and the code after it restores the
    row (DW_CFA_remember_state / restore_state). DWARF 5 6.4.2.4: the whole row comes back."""
    expr = bytes([0x76, 0x78, 0x06])                 # DW_OP_breg6 (rbp) -8; DW_OP_deref
    cie = native._Cie(code_align=1, data_align=-8, ra_reg=16, fde_enc=0x1B, has_z=True,
                      initial=bytes([0x0C, 7, 8, 0x80 | 16, 1]))   # def_cfa rsp+8; ra at cfa-8
    ins = bytes([0x41, 0x0F, len(expr), *expr,       # at +1: def_cfa_expression
                 0x10, 6, 2, 0x76, 0x00,             # rbp saved at DW_OP_breg6 0
                 0x41, 0x0A,                         # at +2: remember_state
                 0x0C, 10, 0,                        # def_cfa r10+0 (the epilogue)
                 0x41, 0x0B])                        # at +3: restore_state
    at2, at3 = native._execute(cie, ins, 0x1000, 0x1002), native._execute(cie, ins, 0x1000, 0x1003)
    assert (at2.cfa_reg, at2.cfa_expr) == (10, None)
    assert at3.cfa_expr == expr and 6 in at3.exprs
    # evaluated: rbp = 0x7000, [0x6ff8] = 0x9000 -> CFA 0x9000; the return address at CFA-8
    mem = {0x6FF8: 0x9000, 0x8FF8: 0x4242}.get
    assert native.evaluate(at3.cfa_expr, {6: 0x7000}, mem) == 0x9000
    assert native.evaluate(expr, {}, mem) is None     # rbp unknown: not evaluated
