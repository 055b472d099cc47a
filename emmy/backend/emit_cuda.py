"""emit-cuda: prints specialised emmy.kernel IR as CUDA C++, one printer case per op.

The text includes only emmy's device header, so the same source compiles with NVRTC for a
GPU and with g++ for the emulator. Constants are printed inline; a value known once forks
are fixed (a loop width, a reduction group) is folded to a literal. Inside a `kernel.for`
of width W, a load or store at `invariant + j` becomes one vector access of W elements.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import UnionType

from xdsl.dialects import arith
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import (
    Float32Type,
    IntegerType,
    ModuleOp,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue

from emmy.base import dtypes
from emmy.base.errors import EmitError
from emmy.dialects import fork, kernel
from emmy.dialects.fold import Folded, float_literal, fold, fold_int
from emmy.program import KernelInfo

HEADER = '#include "emmy_device.cuh"\n'


def storage_type(element: Attribute) -> str:
    return dtypes.lookup(dtypes.dtype_name(element)).c_type


#: binary ops printed as `a <operator> b`
INFIX = {
    arith.AddiOp: "+",
    arith.SubiOp: "-",
    arith.MuliOp: "*",
    arith.DivSIOp: "/",
    arith.RemSIOp: "%",
    arith.AddfOp: "+",
    arith.SubfOp: "-",
    arith.MulfOp: "*",
    arith.DivfOp: "/",
    # on booleans (i1)
    arith.AndIOp: "&&",
    arith.OrIOp: "||",
    arith.XOrIOp: "!=",
}
#: ops printed as a call of emmy's device header: `emmy::fmax(a, b)`
CALLS = {
    arith.MaximumfOp: "emmy::fmax",
    arith.MinimumfOp: "emmy::fmin",
    xmath.LogOp: "emmy::log",
    xmath.Exp2Op: "emmy::exp2",
    xmath.TanhOp: "emmy::tanh",
    xmath.ErfOp: "emmy::erf",
    xmath.SqrtOp: "emmy::sqrt",
    xmath.RsqrtOp: "emmy::rsqrt",
    xmath.AbsFOp: "emmy::abs",
}
COMPARE = {
    "eq": "==",
    "ne": "!=",
    "slt": "<",
    "sle": "<=",
    "sgt": ">",
    "sge": ">=",
    "oeq": "==",
    "une": "!=",
    "olt": "<",
    "ole": "<=",
    "ogt": ">",
    "oge": ">=",
}
#: ops printed as a coordinate of the launch: `(int)threadIdx.x`
COORDINATES = {
    kernel.ThreadIdOp: "threadIdx",
    kernel.BlockIdOp: "blockIdx",
    kernel.BlockDimOp: "blockDim",
    kernel.GridDimOp: "gridDim",
}
REDUCE_OPS = {
    "sum": "emmy::op_sum{}",
    "max": "emmy::op_max{}",
    "min": "emmy::op_min{}",
    "prod": "emmy::op_prod{}",
}


@dataclass
class CudaProgram:
    source: str
    kernels: dict[str, KernelInfo] = field(default_factory=dict)


def c_type(typ: Attribute) -> str:
    if isinstance(typ, Float32Type):
        return "float"
    if isinstance(typ, IntegerType):
        return "bool" if typ.width.data == 1 else storage_type(typ)
    raise EmitError(f"no CUDA type for {typ}")


def emit_module(module: ModuleOp) -> CudaProgram:
    """CUDA source for every site of a specialised module, with launch information."""
    program = CudaProgram(HEADER)
    for op in module.walk():
        if isinstance(op, fork.KnobOp | fork.AlternativesOp):
            raise EmitError(
                "the module still has unresolved forks: run resolve-forks and specialize-forks first"
            )
    for site in module.ops:
        if not isinstance(site, fork.SiteOp):
            continue
        func = next((op for op in site.body.block.ops if isinstance(op, kernel.FuncOp)), None)
        if func is None:
            continue  # a site of a host-level choice (attention_path, matmul_path) or a host call: no kernel
        launch = next(op for op in site.body.block.ops if isinstance(op, kernel.LaunchOp))
        _check_launch_fits(site, launch)
        block = fold_int(launch.block, "the block size")
        program.source += "\n" + KernelPrinter(func, block).print()
        _check_shared_memory(func, launch)
        program.kernels[func.sym_name.data] = KernelInfo(
            name=func.sym_name.data,
            site=site.ref,
            config=site.config.as_dict() if site.config is not None else {},
            arg_names=tuple(n.data for n in func.arg_names),
            arg_dtypes=tuple(dtypes.dtype_name(kernel.pointee(a)) for a in func.body.block.args),
            grid=fold_int(launch.grid, "the grid size"),
            block=block,
            smem=fold_int(launch.smem, "the shared memory size"),
        )
    return program


def shared_arrays_end(func: kernel.FuncOp) -> int:
    """Bytes of dynamic shared memory the kernel's arrays take, rounded up to 16: the
    scratch of its reductions starts there."""
    end = 0
    for op in func.walk():
        if isinstance(op, kernel.SharedArrayOp):
            size = dtypes.lookup(dtypes.dtype_name(op.result.type.element)).bytes
            array_end = fold_int(op.offset, "a shared array's offset") + size * fold_int(
                op.count, "a shared array's size"
            )
            end = max(end, array_end)
    return -(-end // 16) * 16


def _check_shared_memory(func: kernel.FuncOp, launch: kernel.LaunchOp) -> None:
    """The launch must give the kernel its shared arrays, then 8 bytes per thread of
    scratch if it reduces across threads."""
    needed = shared_arrays_end(func)
    if any(isinstance(op, kernel.GroupReduceOp) for op in func.walk()):
        needed += 8 * fold_int(launch.block, "the block size")
    given = fold_int(launch.smem, "the shared memory size")
    if needed > given:
        raise EmitError(
            f"kernel {func.sym_name.data} needs {needed} bytes of shared memory (its arrays, "
            f"then reduction scratch) but its launch gives {given}: raise `shared` in its "
            "launch clause"
        )


def _check_launch_fits(site: fork.SiteOp, launch: kernel.LaunchOp) -> None:
    """A 64-bit kernel computes its launch in 64 bits and narrows it for the launch: a
    value the narrowing would wrap is an error, not a wrong launch."""
    for what, value in (("grid", launch.grid), ("block", launch.block), ("shared", launch.smem)):
        owner = value.owner
        if not isinstance(owner, arith.TruncIOp):
            continue
        wide = fold(owner.input)
        if isinstance(wide, int) and not 0 <= wide < 2**31:
            raise EmitError(
                f"site {site.sym_name.data} ({site.family.data}): its launch's {what} is "
                f"{wide}, beyond what a launch takes (2^31 - 1)"
            )


def _any_of(op_types: Iterable[type[Operation]]) -> UnionType | type[Operation]:
    """The union of `op_types` (the type itself where there is one): one printer method
    registered for the ops of a table."""
    return functools.reduce(operator.or_, op_types)


class KernelPrinter:
    """Prints one kernel.func; every SSA value gets a C name or an inline literal."""

    def __init__(self, func: kernel.FuncOp, block: int):
        self.func = func
        #: the threads of every launch of the kernel: its `__launch_bounds__`
        self.launch_block = block
        self.names: dict[SSAValue, str] = {}
        #: the values known once forks are fixed: the kernel does not change while printed
        self.known: Folded = {}
        self.lines: list[str] = []
        self.indent = 1
        self.counter = 0
        # loads/stores of a vector loop: the op -> the C array element it reads or writes
        self.lane_access: dict[Operation, str] = {}
        self.scratch_offset: int | None = None

    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def line(self, text: str) -> None:
        self.lines.append("  " * self.indent + text)

    def value(self, ssa: SSAValue) -> str:
        if ssa in self.names:
            return self.names[ssa]
        known = fold(ssa, self.known)
        if known is not None:
            return self.literal(known, ssa.type)
        raise EmitError(f"value {ssa} is used before it is defined")

    @staticmethod
    def literal(value: int | float, typ: Attribute) -> str:
        if isinstance(typ, Float32Type):
            return float_literal(float(value))
        if isinstance(typ, IntegerType) and typ.width.data == 1:
            return "true" if value else "false"
        if isinstance(typ, IntegerType) and typ.width.data == 64:
            # a long long, so that a device function's overload sees one type
            return f"({int(value) + 1}LL - 1)" if value == -(2**63) else f"{int(value)}LL"
        return str(int(value))

    def define(self, ssa: SSAValue, expression: str) -> None:
        name = self.fresh()
        self.names[ssa] = name
        self.line(f"const {c_type(ssa.type)} {name} = {expression};")

    def scratch(self) -> str:
        """Where reductions may scribble: after the kernel's shared arrays."""
        if self.scratch_offset is None:
            self.scratch_offset = shared_arrays_end(self.func)
        offset = self.scratch_offset
        return f"emmy::smem() + {offset}" if offset else "emmy::smem()"

    def print(self) -> str:
        params = []
        written = self.func.written_args()
        # `__restrict__` promises the compiler that no other parameter reaches the bytes
        # this one writes or reads while another writes them: a launch binding one buffer
        # to two parameters (a KV cache written in place) breaks that promise
        aliased = self.func.aliased_names()
        args = zip(self.func.body.block.args, self.func.arg_names, strict=True)
        for i, (arg, arg_name) in enumerate(args):
            element = storage_type(kernel.pointee(arg))
            name = f"p_{arg_name.data}"
            self.names[arg] = name
            const = "" if i in written else "const "
            restrict = "" if arg_name.data in aliased else " __restrict__"
            params.append(f"{const}{element}*{restrict} {name}")
        name = self.func.sym_name.data
        self.block(self.func.body.block)
        body = "\n".join(self.lines)
        # a block of this many threads must fit an SM: ptxas keeps the registers within it,
        # so no option fails to launch. At least one block per SM, said outright: with the
        # threads alone, ptxas squeezes some kernels to full occupancy and spills them
        bounds = f"__launch_bounds__({self.launch_block}, 1)"
        return (
            f"EMMY_KERNEL void {bounds} {name}({', '.join(params)}) {{\n{body}\n}}\n"
            f"EMMY_EMU_ENTRY({name})\n"
        )

    def block(self, block: Block) -> None:
        for op in block.ops:
            self.operation(op)

    def operation(self, op: Operation) -> None:
        if isinstance(op, arith.ConstantOp):
            return  # printed inline where used
        if op.dialect_name() == "arith" and all(
            fold(r, self.known) is not None for r in op.results
        ):
            return  # known once forks are fixed: printed as a literal where used
        self.emit(op)

    @functools.singledispatchmethod
    def emit(self, op: Operation) -> None:
        """Prints `op`: one method per op (or per table of ops of one form) below."""
        raise EmitError(f"emit-cuda has no case for {op.name}")

    @emit.register
    def _unprinted(self, op: kernel.ReturnOp | kernel.YieldOp) -> None:
        pass  # a loop prints its yield's values

    @emit.register(_any_of(INFIX))
    def _infix(self, op: Operation) -> None:
        lhs, rhs = self.value(op.operands[0]), self.value(op.operands[1])
        self.define(op.results[0], f"{lhs} {INFIX[type(op)]} {rhs}")

    @emit.register(_any_of(CALLS))
    def _call(self, op: Operation) -> None:
        args = ", ".join(self.value(o) for o in op.operands)
        self.define(op.results[0], f"{CALLS[type(op)]}({args})")

    @emit.register
    def _exp(self, op: xmath.ExpOp) -> None:
        fast = op.fastmath == arith.FastMathFlagsAttr("fast")
        self.define(op.result, f"emmy::{'fast_exp' if fast else 'exp'}({self.value(op.operand)})")

    @emit.register
    def _max_min(self, op: arith.MaxSIOp | arith.MinSIOp) -> None:
        a, b = self.value(op.operands[0]), self.value(op.operands[1])
        cmp = ">" if isinstance(op, arith.MaxSIOp) else "<"
        self.define(op.results[0], f"({a} {cmp} {b} ? {a} : {b})")

    @emit.register
    def _compare(self, op: arith.CmpiOp | arith.CmpfOp) -> None:
        predicate = op.predicate.value.data
        names = (
            arith.CMPI_COMPARISON_OPERATIONS
            if isinstance(op, arith.CmpiOp)
            else arith.CMPF_COMPARISON_OPERATIONS
        )
        symbol = COMPARE[names[predicate]]
        self.define(op.result, f"{self.value(op.lhs)} {symbol} {self.value(op.rhs)}")

    @emit.register
    def _select(self, op: arith.SelectOp) -> None:
        self.define(
            op.result, f"{self.value(op.cond)} ? {self.value(op.lhs)} : {self.value(op.rhs)}"
        )

    @emit.register
    def _negf(self, op: arith.NegfOp) -> None:
        self.define(op.result, f"-{self.value(op.operands[0])}")

    @emit.register
    def _sitofp(self, op: arith.SIToFPOp) -> None:
        self.define(op.result, f"(float){self.value(op.input)}")

    @emit.register
    def _integer_cast(
        self, op: arith.TruncIOp | arith.ExtSIOp | arith.ExtUIOp | arith.FPToSIOp | arith.UIToFPOp
    ) -> None:
        self.define(op.result, f"({c_type(op.result.type)}){self.value(op.input)}")

    @emit.register
    def _device_call(self, op: kernel.DeviceCallOp) -> None:
        args = ", ".join(self.value(a) for a in op.args)
        self.define(op.result, f"emmy::{op.callee.data}({args})")

    @emit.register(_any_of(COORDINATES))
    def _coordinate(
        self, op: kernel.ThreadIdOp | kernel.BlockIdOp | kernel.BlockDimOp | kernel.GridDimOp
    ) -> None:
        self.define(op.results[0], f"(int){COORDINATES[type(op)]}.{op.dim.data}")

    @emit.register
    def _load(self, op: kernel.LoadOp) -> None:
        access = self.lane_access.get(op)
        address = f"{self.value(op.ptr)} + {self.value(op.index)}"
        if isinstance(op.result.type, IntegerType):
            access = access or f"*({address})"  # integers are read as they are stored
        self.define(op.result, access if access else f"emmy::load({address})")

    @emit.register
    def _store(self, op: kernel.StoreOp) -> None:
        access = self.lane_access.get(op)
        if access:
            self.line(f"{access} = {self.value(op.value)};")
            return
        if isinstance(op.value.type, IntegerType):  # integers are stored as they are
            self.line(f"*({self.value(op.ptr)} + {self.value(op.index)}) = {self.value(op.value)};")
            return
        self.line(
            f"emmy::store({self.value(op.ptr)} + {self.value(op.index)}, {self.value(op.value)});"
        )

    @emit.register
    def _shared_array(self, op: kernel.SharedArrayOp) -> None:
        offset = fold_int(op.offset, "a shared array's offset")
        name = self.fresh("shared")
        self.names[op.result] = name
        element = storage_type(op.result.type.element)
        self.line(
            f"{element}* const {name} = reinterpret_cast<{element}*>(emmy::smem() + {offset});"
        )

    @emit.register
    def _local_array(self, op: kernel.LocalArrayOp) -> None:
        count = fold_int(op.count, "a local array's size")
        if not 0 < count <= 256:
            raise EmitError(f"a local array of {count} elements: 1 to 256 fit in registers")
        name = self.fresh("local")
        self.names[op.result] = name
        element = "float" if isinstance(op.result.type.element, Float32Type) else "unsigned"
        self.line(f"{element} {name}[{count}];")

    @emit.register
    def _ldmatrix(self, op: kernel.LdmatrixOp) -> None:
        count = op.count.value.data
        call = "ldmatrix_trans" if op.trans.value.data else "ldmatrix"
        fragment = f"{self.value(op.fragment)} + {self.value(op.fragment_offset)}"
        self.line(
            f"emmy::{call}<{count}>(*reinterpret_cast<unsigned(*)[{count}]>({fragment}), "
            f"{self.value(op.ptr)} + {self.value(op.offset)});"
        )

    @emit.register
    def _mma(self, op: kernel.MmaOp) -> None:
        dtype = dtypes.lookup(op.dtype.data).c_type
        acc = f"*reinterpret_cast<emmy::frag_c*>({self.value(op.acc)} + {self.value(op.offset)})"
        a = f"*reinterpret_cast<const emmy::frag_a*>({self.value(op.a)} + {self.value(op.a_offset)})"
        b = f"*reinterpret_cast<const emmy::frag_b*>({self.value(op.b)} + {self.value(op.b_offset)})"
        self.line(f"emmy::mma_16816<{dtype}>({acc}, {a}, {b}, {acc});")

    @emit.register
    def _pack_half2(self, op: kernel.PackHalf2Op) -> None:
        dtype = dtypes.lookup(op.dtype.data).c_type
        self.line(
            f"{self.value(op.fragment)}[{self.value(op.offset)}] = "
            f"emmy::pack_half2<{dtype}>({self.value(op.lo)}, {self.value(op.hi)});"
        )

    @emit.register
    def _copy_async(self, op: kernel.CopyAsyncOp) -> None:
        self.line(
            f"emmy::cp_async<16>({self.value(op.dst)} + {self.value(op.dst_offset)}, "
            f"{self.value(op.src)} + {self.value(op.src_offset)}, {self.value(op.valid_bytes)});"
        )

    @emit.register
    def _copy_async_wait(self, op: kernel.CopyAsyncWaitOp) -> None:
        self.line("emmy::cp_async_commit();")
        pending = fold_int(op.pending, "the number of pending cp.async groups")
        self.line(f"emmy::cp_async_wait<{pending}>();")

    @emit.register
    def _barrier(self, op: kernel.BarrierOp) -> None:
        self.line("emmy::sync_threads();")

    @emit.register
    def _if(self, op: kernel.IfOp) -> None:
        self.line(f"if ({self.value(op.condition)}) {{")
        self.indent += 1
        self.block(op.body.block)
        self.indent -= 1
        self.line("}")

    @emit.register
    def group_reduce(self, op: kernel.GroupReduceOp) -> None:
        group = fold_int(op.group, "the reduction group")
        strategy = op.chosen_strategy(fold_int(op.strategy, "the reduction strategy"))
        params = f"<{group}, emmy::Reduce::{strategy.value}>"
        if op.kind.data == kernel.GroupReduction.ONLINE_SOFTMAX:
            m, s = (self.fresh("r") for _ in range(2))
            self.line(f"float {m} = {self.value(op.values[0])}, {s} = {self.value(op.values[1])};")
            self.line(f"emmy::group_reduce_online{params}({m}, {s}, {self.scratch()});")
            self.names[op.reduced[0]], self.names[op.reduced[1]] = m, s
            return
        value = self.value(op.values[0])
        self.define(
            op.reduced[0],
            f"emmy::group_reduce{params}({value}, {REDUCE_OPS[op.kind.data]}, {self.scratch()})",
        )

    @emit.register
    def loop(self, op: kernel.ForOp) -> None:
        width = fold_int(op.width, "the loop width")
        if width not in (1, 2, 4, 8, 16):
            raise EmitError(f"loop width {width} is not 1, 2, 4, 8 or 16")
        index, *carried_args = op.body.block.args
        carried = []
        for arg, init, result in zip(carried_args, op.iter_args, op.res, strict=True):
            name = self.fresh("c")
            self.line(f"{c_type(arg.type)} {name} = {self.value(init)};")
            self.names[arg] = self.names[result] = name
            carried.append(name)
        start = self.fresh("j")
        lower, upper, step = (fold(v, self.known) for v in (op.lower, op.upper, op.step))
        if width == 1 and lower is not None and upper is not None and step is not None and step > 0:
            trips = -(-(upper - lower) // step)
            # short constant loops unroll, so local arrays live in registers; a loop over
            # tiles (one with a barrier) stays a loop: unrolled, it multiplies the code and
            # the compile time for nothing
            tiled = any(isinstance(inner, kernel.BarrierOp) for inner in op.body.walk())
            if trips <= 32 and not tiled:
                self.line("#pragma unroll")
        counter = c_type(index.type)
        self.line(
            f"for ({counter} {start} = {self.value(op.lower)}; {start} < {self.value(op.upper)}; "
            f"{start} += {self.value(op.step)}) {{"
        )
        self.indent += 1
        stores: list[str] = []
        if width > 1:
            lane = self.fresh("k")
            stores = self.vector_accesses(op, width, start, lane)
            self.line("#pragma unroll")
            self.line(f"for (int {lane} = 0; {lane} < {width}; ++{lane}) {{")
            self.indent += 1
            self.names[index] = self.fresh("i")
            self.line(f"const {counter} {self.names[index]} = {start} + {lane};")
        else:
            self.names[index] = start
        self.block(op.body.block)
        yield_op = op.body.block.last_op
        assert isinstance(yield_op, kernel.YieldOp)
        for name, value in zip(carried, yield_op.values, strict=True):
            self.line(f"{name} = {self.value(value)};")
        if width > 1:
            self.indent -= 1
            self.line("}")
        for line in stores:
            self.line(line)
        self.indent -= 1
        self.line("}")

    def vector_accesses(self, op: kernel.ForOp, width: int, start: str, lane: str) -> list[str]:
        """Turns loads/stores at `invariant + j` into whole-vector accesses; returns the
        vector stores to print after the lanes."""
        index = op.body.block.args[0]
        stores = []
        for inner in op.body.block.ops:
            if not isinstance(inner, kernel.LoadOp | kernel.StoreOp):
                continue
            if not dtypes.is_float_type(kernel.pointee(inner.ptr)):
                continue  # index tensors are read element by element
            base = self.invariant_base(inner.index, index, op)
            if base is None:
                continue
            array = self.fresh("vec")
            address = f"{self.value(inner.ptr)} + {base} + {start}"
            self.line(f"float {array}[{width}];")
            if isinstance(inner, kernel.LoadOp):
                self.line(f"emmy::load_vec<{width}>({address}, {array});")
            else:
                stores.append(f"emmy::store_vec<{width}>({address}, {array});")
            self.lane_access[inner] = f"{array}[{lane}]"
        return stores

    def invariant_base(self, offset: SSAValue, index: SSAValue, loop: kernel.ForOp) -> str | None:
        if offset == index:
            return "0"
        owner = offset.owner
        if not isinstance(owner, arith.AddiOp):
            return None
        lhs, rhs = owner.lhs, owner.rhs
        other = rhs if lhs == index else lhs if rhs == index else None
        if other is None or _defined_inside(other, loop):
            return None
        return self.value(other)


def _defined_inside(value: SSAValue, loop: Operation) -> bool:
    owner = value.owner
    op = owner if isinstance(owner, Operation) else owner.parent_op()
    while op is not None:
        if op is loop:
            return True
        op = op.parent_op()
    return False
