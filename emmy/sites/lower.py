"""Instantiates a kernel declaration for one problem key as a `fork.site` of emmy.kernel IR.

Integers are the kernel's index type, floats f32, conditions i1. The index type is i32,
or i64 where the key says `index=i64` (a site with a tensor of 2^31 elements or more):
then every integer the kernel computes (loop counters, offsets, products of coordinates)
is 64-bit, and only what must fit the ops' 32-bit fields (launch geometry, shared and
local array sizes and offsets, fragment offsets) is narrowed back. Fork values are the i32
results of `fork.knob` ops, widened where the index type is i64; symbolic forks select
`fork.alternatives` branches with `match` and reduction strategies in `group_reduce`.
Tensor indexing linearises over the key's dims; inside a `width` loop, an access whose
last index is the loop index and whose other indices do not change in the loop is
computed before the loop, so the emitter can make it one vector access.

Lowering walks the declaration's syntax tree (emmy.dsl.ast): `statement` and `expr`
dispatch on the node's type, one method per kind of node.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import singledispatchmethod

from xdsl.dialects import arith
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import (
    FloatAttr,
    IntegerAttr,
    IntegerType,
    f32,
    i1,
    i8,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from emmy.base import dtypes
from emmy.base.errors import DslError, EmmyError
from emmy.base.problem_key import (
    DTYPES_NAME,
    INDEX_NAME,
    WIDE_INDEX,
    InputKind,
    KeyValue,
    parse_input_kinds,
)
from emmy.dialects import fork, kernel
from emmy.dsl import ast
from emmy.dsl.ast import KernelDecl, Param, assigned_names, names_read
from emmy.dsl.keys import (
    active_params,
    chain_tree,
    check_key,
    complete_key,
    param_dtype,
    problem_key,
)
from emmy.sites.lower_chain import ChainLowering
from emmy.sites.lower_intrinsics import lower_intrinsic

INT_BINARY = {
    "+": arith.AddiOp,
    "-": arith.SubiOp,
    "*": arith.MuliOp,
    "/": arith.DivSIOp,
    "%": arith.RemSIOp,
}
FLOAT_BINARY = {"+": arith.AddfOp, "-": arith.SubfOp, "*": arith.MulfOp, "/": arith.DivfOp}
INT_COMPARE = {"==": "eq", "!=": "ne", "<": "slt", "<=": "sle", ">": "sgt", ">=": "sge"}
FLOAT_COMPARE = {"==": "oeq", "!=": "une", "<": "olt", "<=": "ole", ">": "ogt", ">=": "oge"}
FLOAT_UNARY: dict[str, Callable[[SSAValue], Operation]] = {
    "exp": xmath.ExpOp,
    "fast_exp": lambda x: xmath.ExpOp(x, arith.FastMathFlagsAttr("fast")),
    # 2^x: the GPU's ex2.approx, one instruction; a kernel folds log2(e) into its scale
    "exp2": lambda x: xmath.Exp2Op(x, arith.FastMathFlagsAttr("fast")),
    "log": xmath.LogOp,
    "tanh": xmath.TanhOp,
    "erf": xmath.ErfOp,
    "sqrt": xmath.SqrtOp,
    "rsqrt": xmath.RsqrtOp,
    "abs": xmath.AbsFOp,
}
COORDINATES = {
    "thread_id": kernel.ThreadIdOp,
    "block_id": kernel.BlockIdOp,
    "block_dim": kernel.BlockDimOp,
    "grid_dim": kernel.GridDimOp,
}


@dataclass
class Value:
    """A name's binding: an SSA value, or a dtype/symbol known at instantiation."""

    ssa: SSAValue | None = None
    constant: int | str | None = None
    mutable: bool = False


@dataclass
class Scope:
    names: dict[str, Value] = field(default_factory=dict)
    loop_defined: set[str] = field(default_factory=set)


class Lowering:
    """Builds the IR of one site; `block` is where ops are appended."""

    def __init__(self, decl: KernelDecl, key: Mapping[str, KeyValue], site_name: str):
        self.decl, self.key, self.site_name = decl, complete_key(decl, key), site_name
        #: the integer type of the kernel's arithmetic (see the module's docstring)
        self.index = i64 if self.key.get(INDEX_NAME) == WIDE_INDEX else i32
        self.block = Block()
        self.scope = Scope()
        self.knobs: dict[str, fork.KnobOp] = {}
        # blocks enclosing the innermost `width` loop, where loop-invariant indexing goes
        self.hoist_stack: list[tuple[Block, str, set[str]]] = []
        self.uses_reduction = False
        self.shared_bytes: SSAValue | None = None
        self.in_if = 0

    # -- building blocks -------------------------------------------------------------
    def emit(self, op: Operation) -> None:
        """Appends an op whose results, if it has any, are read from the op itself."""
        self.block.add_op(op)

    def add(self, op: Operation) -> SSAValue:
        """Appends an op of one result, and gives that result."""
        self.emit(op)
        assert len(op.results) == 1, f"{op.name} has {len(op.results)} results, not one"
        return op.results[0]

    def const_int(self, value: int) -> SSAValue:
        return self.add(arith.ConstantOp(IntegerAttr(value, self.index)))

    def narrow(self, value: SSAValue) -> SSAValue:
        """An integer for an op's 32-bit field (a size, a launch dimension, an offset into
        shared or local memory, all small): truncated from the index type."""
        return value if value.type == i32 else self.add(arith.TruncIOp(value, i32))

    def narrow_expr(self, node: ast.Expr) -> SSAValue:
        return self.narrow(self.int_expr(node))

    def widened(self, value: SSAValue) -> SSAValue:
        """An i32 integer (a fork's value, an i32 tensor's element) in the index type, as C
        promotes it."""
        return self.add(arith.ExtSIOp(value, self.index)) if value.type != self.index else value

    def const_float(self, value: float) -> SSAValue:
        return self.add(arith.ConstantOp(FloatAttr(value, f32)))

    def bound(self, name: str) -> SSAValue:
        """The SSA value of a name bound to one: a parameter, an array, a var, a fork."""
        ssa = self.scope.names[name].ssa
        assert ssa is not None, f"{name!r} is bound to a constant of the key, not a value"
        return ssa

    def error(self, node: ast.Node, message: str) -> DslError:
        return self.decl.error(node, message)

    # -- the site -----------------------------------------------------------------------
    def site(self) -> fork.SiteOp:
        decl = self.decl
        check_key(decl, self.key)
        for name in decl.key:
            value = self.key[name]
            self.scope.names[name] = Value(constant=value)
        for decl_fork in decl.forks:
            knob = fork.KnobOp(
                decl_fork.name, list(decl_fork.options), decl_fork.default, decl_fork.where
            )
            self.knobs[decl_fork.name] = knob
            self.emit(knob)
            self.scope.names[decl_fork.name] = Value(ssa=self.widened(knob.result))
        params, arg_names, arg_types = self.signature()
        site_block = self.block
        func = kernel.FuncOp(self.site_name, arg_names, arg_types)
        for name, arg in zip(arg_names, func.body.block.args, strict=True):
            self.scope.names[name] = Value(ssa=arg)
        self.params = params
        self.block = func.body.block
        for stmt in decl.body:
            self.statement(stmt)
        self.emit(kernel.ReturnOp())
        self.block = site_block
        grid = self.narrow_expr(decl.launch["grid"])
        block = self.narrow_expr(decl.launch["block"])
        if "shared" in decl.launch:
            smem = self.narrow_expr(decl.launch["shared"])
        elif self.uses_reduction:
            raise self.error(
                decl.body[0],
                "group_reduce needs `shared = ...` (at least 8 bytes per thread) in launch",
            )
        else:
            smem = self.narrow(self.const_int(0))
        self.emit(func)
        self.emit(kernel.LaunchOp(self.site_name, grid, block, smem))
        return fork.SiteOp(
            self.site_name,
            decl.name,
            problem_key(decl, self.key),
            Region(site_block),
            fork.SiteKind.KERNEL,
        )

    def signature(self) -> tuple[dict[str, tuple[str, ...]], list[str], list[Attribute]]:
        """Kernel parameters: a variadic param expands to one pointer per input of the key."""
        params: dict[str, tuple[str, ...]] = {}
        names: list[str] = []
        types: list[Attribute] = []
        for param in active_params(self.decl, self.key):
            element = dtypes.xdsl_type(param_dtype(param, self.key))
            if param.variadic:
                for i, dtype in enumerate(self.input_dtypes(param)):
                    names.append(f"in{i}")
                    params[f"in{i}"] = param.dims
                    types.append(kernel.PtrType(dtypes.xdsl_type(dtype)))
                continue
            names.append(param.name)
            params[param.name] = param.dims
            types.append(kernel.PtrType(element))
        return params, names, types

    def input_dtypes(self, param: Param) -> list[str]:
        """The storage type of each input of a variadic parameter: the key's `dtypes`
        (`f32/i64`) where the inputs' types differ, else the parameter's own."""
        count = len(self.input_kinds())
        text = str(self.key.get(DTYPES_NAME) or "")
        if not text:
            return [param_dtype(param, self.key)] * count
        named = text.split("/")
        if len(named) != count or not all(dtypes.is_storage(d) for d in named):
            raise DslError(
                self.decl.path,
                self.decl.line,
                1,
                f"{DTYPES_NAME}={text!r} must name a storage type for each of {count} inputs",
            )
        return named

    def input_kinds(self) -> tuple[InputKind, ...]:
        try:
            return parse_input_kinds(str(self.key.get("inputs") or ""))
        except EmmyError as error:
            raise DslError(self.decl.path, self.decl.line, 1, str(error)) from None

    # -- statements --------------------------------------------------------------------
    @singledispatchmethod
    def statement(self, stmt: ast.Stmt) -> None:
        raise self.error(stmt, f"unsupported statement {type(stmt).__name__}")

    def bind(self, name: ast.Name, value: Value) -> None:
        if name.id in self.scope.names and self.scope.names[name.id].constant is not None:
            raise self.error(name, f"{name.id!r} is a key name and cannot be rebound")
        if name.id in self.knobs:
            raise self.error(name, f"{name.id!r} is a fork and cannot be rebound")
        self.scope.names[name.id] = value
        for _, _, defined in self.hoist_stack:
            defined.add(name.id)

    @statement.register
    def let(self, stmt: ast.Let) -> None:
        if len(stmt.targets) == 1:
            self.bind(stmt.targets[0], Value(ssa=self.expr(stmt.value)))
            return
        values = self.multi_expr(stmt.value)
        if len(values) != len(stmt.targets):
            raise self.error(stmt, f"expected {len(values)} names, got {len(stmt.targets)}")
        for name, value in zip(stmt.targets, values, strict=True):
            self.bind(name, Value(ssa=value))

    @statement.register
    def var(self, stmt: ast.Var) -> None:
        self.bind(stmt.target, Value(ssa=self.expr(stmt.value), mutable=True))

    @statement.register
    def assign(self, stmt: ast.Assign) -> None:
        name = stmt.target.id
        current = self.scope.names.get(name)
        if current is None or not current.mutable:
            raise self.error(stmt.target, f"{name} is not a var (declare it with `var`)")
        current_type = self.bound(name).type
        value = self.expr(stmt.value)
        if value.type == i32 and current_type == self.index:
            value = self.widened(value)
        if value.type != current_type:
            raise self.error(
                stmt.value, f"{name} is {_type_name(current_type)}, not {_type_name(value.type)}"
            )
        self.scope.names[name] = Value(ssa=value, mutable=True)
        for _, _, defined in self.hoist_stack:
            defined.add(name)

    @statement.register
    def store(self, stmt: ast.Store) -> None:
        ptr, offset = self.address(stmt, stmt.tensor.id, stmt.indices)
        value = self.expr(stmt.value)
        target = kernel.loaded_type(kernel.pointee(ptr))
        if value.type != target:
            value = self.stored_integer(stmt.value, value, target)
        self.emit(kernel.StoreOp(value, ptr, offset))

    def stored_integer(self, node: ast.Expr, value: SSAValue, target: Attribute) -> SSAValue:
        """An integer converted to an integer tensor's element type (a sum accumulated in
        i64 stored to i32, a flag to i8); floats go to float tensors only."""
        width = _integer_width(value.type)
        if width in (0, 1) or not isinstance(target, IntegerType):
            raise self.error(node, f"cannot store {_type_name(value.type)} to a tensor of {target}")
        if width > target.width.data:
            return self.add(arith.TruncIOp(value, target))
        return self.add(arith.ExtSIOp(value, target))

    @statement.register
    def for_(self, stmt: ast.For) -> None:
        lower, upper, step = (self.int_expr(n) for n in (stmt.start, stmt.stop, stmt.step))
        width = self.narrow(
            self.int_expr(stmt.width) if stmt.width is not None else self.const_int(1)
        )
        carried = sorted(
            n
            for n in assigned_names(stmt.body)
            if n in self.scope.names and self.scope.names[n].mutable
        )
        inits = [self.bound(n) for n in carried]
        body_block = Block(arg_types=[self.index, *(v.type for v in inits)])
        outer_block, outer_names = self.block, dict(self.scope.names)
        index_name = stmt.index.id
        self.scope.names[index_name] = Value(ssa=body_block.args[0])
        for name, arg in zip(carried, body_block.args[1:], strict=True):
            self.scope.names[name] = Value(ssa=arg, mutable=True)
        self.hoist_stack.append((outer_block, index_name, {index_name, *carried}))
        self.block = body_block
        for inner in stmt.body:
            self.statement(inner)
        self.emit(kernel.YieldOp(*(self.bound(n) for n in carried)))
        self.hoist_stack.pop()
        self.block, self.scope.names = outer_block, outer_names
        loop = kernel.ForOp(lower, upper, step, width, inits, Region(body_block))
        self.emit(loop)
        for name, result in zip(carried, loop.res, strict=True):
            self.scope.names[name] = Value(ssa=result, mutable=True)

    @statement.register
    def match(self, stmt: ast.Match) -> None:
        name = stmt.subject.id
        if name in self.key:
            self.static_match(stmt, name)
            return
        decl_fork = self.decl.fork(name)
        if decl_fork is None or not decl_fork.is_symbolic:
            raise self.error(stmt.subject, f"match needs a symbolic fork, and {name} is not one")
        arm_names = [arm.label for arm in stmt.arms]
        if sorted(arm_names) != sorted(map(str, decl_fork.options)):
            raise self.error(
                stmt,
                f"match {name} must have one arm per option {list(decl_fork.options)}, got {arm_names}",
            )
        regions = []
        by_name = {arm.label: arm for arm in stmt.arms}
        outer_block, outer_names = self.block, dict(self.scope.names)
        for option in decl_fork.options:
            arm = by_name[str(option)]
            for assigned in assigned_names(arm.body):
                if assigned in outer_names:
                    raise self.error(
                        arm, f"a match arm cannot assign {assigned!r} declared outside it"
                    )
            self.block = Block()
            for inner in arm.body:
                self.statement(inner)
            regions.append(Region(self.block))
            self.scope.names = dict(outer_names)
        self.block = outer_block
        self.emit(
            fork.AlternativesOp(self.knobs[name].result, list(map(str, decl_fork.options)), regions)
        )

    def static_match(self, stmt: ast.Match, name: str) -> None:
        """`match` on a key name is decided at instantiation: the arm of the key's value
        (or `_`) stands in its place."""
        value = str(self.key[name])
        by_name = {arm.label: arm for arm in stmt.arms}
        arm = by_name.get(value, by_name.get("_"))
        if arm is None:
            raise self.error(
                stmt, f"match {name}: no arm for {value!r} (arms: {', '.join(by_name)})"
            )
        for inner in arm.body:
            self.statement(inner)

    @statement.register
    def if_(self, stmt: ast.If) -> None:
        condition = self.condition(stmt.condition)
        for assigned in assigned_names(stmt.body):
            if assigned in self.scope.names:
                raise self.error(stmt, f"an if cannot assign {assigned!r} declared outside it")
        outer_block, outer_names = self.block, dict(self.scope.names)
        self.block = Block()
        self.in_if += 1
        for inner in stmt.body:
            self.statement(inner)
        self.in_if -= 1
        region = Region(self.block)
        self.block, self.scope.names = outer_block, outer_names
        self.emit(kernel.IfOp(condition, region))

    @statement.register
    def sync(self, stmt: ast.Sync) -> None:
        if self.in_if:
            raise self.error(stmt, "sync() inside an if: threads that skip it would never arrive")
        self.emit(kernel.BarrierOp())

    @statement.register
    def shared(self, stmt: ast.SharedArray) -> None:
        """`shared tile: f32[n];` an array in the block's dynamic shared memory."""
        element_name = str(self.key.get(stmt.dtype.id, stmt.dtype.id))
        if not dtypes.is_storage(element_name):
            raise self.error(stmt.dtype, "shared arrays hold a storage type, or that of a key name")
        if self.hoist_stack or self.in_if:
            raise self.error(stmt, "shared arrays are declared at the top level of a kernel")
        count = self.int_expr(stmt.count)
        offset = self.shared_bytes if self.shared_bytes is not None else self.const_int(0)
        element = dtypes.xdsl_type(element_name)
        array = self.add(kernel.SharedArrayOp(self.narrow(offset), self.narrow(count), element))
        # the next array starts 16-byte aligned, for vector access
        size = self.add(arith.MuliOp(count, self.const_int(dtypes.lookup(element_name).bytes)))
        rounded = self.add(arith.AddiOp(size, self.const_int(15)))
        padded = self.add(
            arith.MuliOp(self.add(arith.DivSIOp(rounded, self.const_int(16))), self.const_int(16))
        )
        self.shared_bytes = self.add(arith.AddiOp(offset, padded))
        self.params[stmt.name.id] = ("",)
        self.bind(stmt.name, Value(ssa=array))

    @statement.register
    def local(self, stmt: ast.LocalArray) -> None:
        """`local acc: f32[n];` a thread's own array (its size a constant once forks are)."""
        if stmt.dtype.id not in ("f32", "u32"):
            raise self.error(stmt.dtype, "local arrays hold f32, or u32 (tensor-core fragments)")
        if self.hoist_stack or self.in_if:
            raise self.error(stmt, "local arrays are declared at the top level of a kernel")
        count = self.narrow_expr(stmt.count)
        element = f32 if stmt.dtype.id == "f32" else i32
        array = self.add(kernel.LocalArrayOp(count, element))
        self.params[stmt.name.id] = ("",)
        self.bind(stmt.name, Value(ssa=array))

    @statement.register
    def intrinsic(self, stmt: ast.CallStmt) -> None:
        """A tensor-core or asynchronous-copy statement (emmy.sites.lower_intrinsics)."""
        lower_intrinsic(self, stmt)

    # -- expressions --------------------------------------------------------------------
    def int_expr(self, node: ast.Expr) -> SSAValue:
        value = self.expr(node)
        if value.type == i32 and self.index != i32:
            return self.widened(value)
        if value.type != self.index:
            raise self.error(node, f"expected an integer, got {_type_name(value.type)}")
        return value

    def float_expr(self, node: ast.Expr) -> SSAValue:
        value = self.expr(node)
        if value.type != f32:
            raise self.error(node, f"expected a float, got {_type_name(value.type)}")
        return value

    def condition(self, node: ast.Expr) -> SSAValue:
        value = self.expr(node)
        if value.type != i1:
            raise self.error(node, "expected a condition")
        return value

    def multi_expr(self, node: ast.Expr) -> list[SSAValue]:
        if isinstance(node, ast.Call) and node.function == "group_reduce":
            return self.group_reduce(node)
        return [self.expr(node)]

    @singledispatchmethod
    def expr(self, node: ast.Expr) -> SSAValue:
        raise self.error(node, f"unsupported expression {type(node).__name__}")

    @expr.register
    def int_literal(self, node: ast.IntLit) -> SSAValue:
        return self.const_int(node.value)

    @expr.register
    def float_literal(self, node: ast.FloatLit) -> SSAValue:
        return self.const_float(node.value)

    @expr.register
    def name(self, node: ast.Name) -> SSAValue:
        if node.id == "inf":
            return self.const_float(math.inf)
        binding = self.scope.names.get(node.id)
        if binding is None:
            raise self.error(node, f"unknown name {node.id!r}")
        if binding.ssa is not None:
            return binding.ssa
        if isinstance(binding.constant, int):
            return self.const_int(binding.constant)
        assert binding.constant is not None, f"{node.id!r} is bound to nothing"
        try:  # a float of the key, e.g. a norm's eps
            return self.const_float(float(binding.constant))
        except (TypeError, ValueError):
            raise self.error(node, f"{node.id!r} is {binding.constant!r}, not a number") from None

    @expr.register
    def negation(self, node: ast.Neg) -> SSAValue:
        value = self.expr(node.operand)
        if value.type == f32:
            return self.add(arith.NegfOp(value))
        return self.binary(node, "-", self.const_int(0), value)

    @expr.register
    def logical_not(self, node: ast.Not) -> SSAValue:
        value = self.condition(node.operand)
        return self.add(arith.XOrIOp(value, self.add(arith.ConstantOp(IntegerAttr(1, i1)))))

    @expr.register
    def logical(self, node: ast.Logical) -> SSAValue:
        combine = arith.AndIOp if isinstance(node, ast.And) else arith.OrIOp
        result = self.condition(node.operands[0])
        for operand in node.operands[1:]:
            result = self.add(combine(result, self.condition(operand)))
        return result

    @expr.register
    def arithmetic(self, node: ast.Infix) -> SSAValue:
        value = self.expr(node.first)
        for op, rhs_node in node.rest:
            rhs = self.expr(rhs_node)
            value = self.binary(node, op, value, rhs)
        return value

    def binary(self, node: ast.Expr, op: str, lhs: SSAValue, rhs: SSAValue) -> SSAValue:
        lhs, rhs = self.promoted(lhs, rhs)
        if lhs.type != rhs.type:
            raise self.error(
                node, f"{_type_name(lhs.type)} {op} {_type_name(rhs.type)}: convert with float()"
            )
        table = FLOAT_BINARY if lhs.type == f32 else INT_BINARY
        if op not in table:
            raise self.error(node, f"operator {op} is not defined on {_type_name(lhs.type)}")
        return self.add(table[op](lhs, rhs))

    @expr.register
    def comparison(self, node: ast.Compare) -> SSAValue:
        symbolic = self.symbolic_comparison(node.lhs, node.rhs)
        if symbolic is not None:
            lhs, rhs = symbolic
        else:
            lhs, rhs = self.expr(node.lhs), self.expr(node.rhs)
        lhs, rhs = self.promoted(lhs, rhs)
        if lhs.type != rhs.type:
            raise self.error(
                node, f"cannot compare {_type_name(lhs.type)} with {_type_name(rhs.type)}"
            )
        if lhs.type == f32:
            return self.add(arith.CmpfOp(lhs, rhs, FLOAT_COMPARE[node.op]))
        return self.add(arith.CmpiOp(lhs, rhs, INT_COMPARE[node.op]))

    def promoted(self, lhs: SSAValue, rhs: SSAValue) -> tuple[SSAValue, SSAValue]:
        """In a 64-bit kernel, an i32 (an i32 tensor's element) meeting an index-type integer
        is widened, as C would; a 32-bit kernel's integers are all i32 already."""
        if self.index == i32 or {lhs.type, rhs.type} != {i32, self.index}:
            return lhs, rhs
        return self.widened(lhs), self.widened(rhs)

    def symbolic_comparison(self, lhs: ast.Expr, rhs: ast.Expr) -> tuple[SSAValue, SSAValue] | None:
        """`algo == online`: a symbolic fork against one of its options, by index."""
        if not isinstance(lhs, ast.Name) or not isinstance(rhs, ast.Name):
            return None
        decl_fork = self.decl.fork(lhs.id)
        if decl_fork is None or not decl_fork.is_symbolic:
            return None
        option = rhs.id
        if option not in decl_fork.options:
            raise self.error(rhs, f"{option!r} is not an option of fork {decl_fork.name}")
        knob = self.bound(decl_fork.name)
        return knob, self.const_int(decl_fork.options.index(option))

    @expr.register
    def element(self, node: ast.Index) -> SSAValue:
        ptr, offset = self.address(node, node.tensor, node.indices)
        return self.add(kernel.LoadOp(ptr, offset))

    def address(
        self, node: ast.Node, name: str, indices: tuple[ast.Expr, ...]
    ) -> tuple[SSAValue, SSAValue]:
        if name not in self.params:
            raise self.error(node, f"{name!r} is not a tensor parameter")
        dims = self.params[name]
        if len(indices) != len(dims):
            raise self.error(
                node, f"{name} has {len(dims)} dimension(s), indexed with {len(indices)}"
            )
        ptr = self.bound(name)
        hoist = self.hoist_target(indices)
        if hoist is None:
            return ptr, self.linear_offset(node, dims, indices)
        # the leading indices are loop invariant: compute them before the loop
        loop_block = self.block
        self.block = hoist
        prefix = (
            self.linear_offset(node, dims[:-1], indices[:-1], trailing=dims[-1])
            if len(dims) > 1
            else None
        )
        self.block = loop_block
        last = self.int_expr(indices[-1])
        return ptr, (last if prefix is None else self.add(arith.AddiOp(prefix, last)))

    def hoist_target(self, indices: tuple[ast.Expr, ...]) -> Block | None:
        if not self.hoist_stack:
            return None
        outer_block, loop_index, defined = self.hoist_stack[-1]
        last = indices[-1]
        if not isinstance(last, ast.Name) or last.id != loop_index:
            return None
        if any(names_read(i) & defined for i in indices[:-1]):
            return None
        return outer_block

    def linear_offset(
        self,
        node: ast.Node,
        dims: tuple[str, ...],
        indices: tuple[ast.Expr, ...],
        trailing: str | None = None,
    ) -> SSAValue:
        """Row-major offset of `indices` over `dims`, times the size of a trailing dim."""
        offset: SSAValue | None = None
        for dim, index in zip(dims, indices, strict=True):
            value = self.int_expr(index)
            if offset is None:
                offset = value
            else:
                offset = self.add(
                    arith.AddiOp(self.add(arith.MuliOp(offset, self.dim_value(node, dim))), value)
                )
        assert offset is not None
        if trailing is not None:
            offset = self.add(arith.MuliOp(offset, self.dim_value(node, trailing)))
        return offset

    def dim_value(self, node: ast.Node, dim: str) -> SSAValue:
        value = int(dim) if dim.isdigit() else self.key.get(dim)
        if not isinstance(value, int):
            raise self.error(node, f"dimension {dim!r} is not an integer of the key")
        return self.const_int(value)

    @expr.register
    def call(self, node: ast.Call) -> SSAValue:
        fname, arg_nodes = node.function, node.args
        if fname == "group_reduce":
            results = self.group_reduce(node)
            if len(results) != 1:
                raise self.error(
                    node, "this reduction gives several values: use `let (a, b) = ...`"
                )
            return results[0]
        if fname == "fn":
            return self.elementwise_chain(node, arg_nodes)
        if fname == "sizeof":
            return self.const_int(self.sizeof(node, arg_nodes))
        if fname in COORDINATES:
            if arg_nodes:
                raise self.error(node, f"{fname}() takes no arguments")
            return self.add(COORDINATES[fname]("x"))
        args = [self.expr(a) for a in arg_nodes]
        return self.builtin(node, fname, args)

    def builtin(self, node: ast.Expr, fname: str, args: list[SSAValue]) -> SSAValue:
        """A function of the kernel language on its lowered arguments (`BUILTINS`)."""
        entry = BUILTINS.get(fname)
        if entry is None:
            raise self.error(node, f"unknown function {fname}()")
        arity, lower = entry
        if len(args) != arity:
            raise self.error(node, f"{fname}() takes {arity} argument(s), got {len(args)}")
        return lower(self, node, fname, args)

    def float_function(self, node: ast.Expr, fname: str, args: list[SSAValue]) -> SSAValue:
        (x,) = args
        if x.type != f32:
            raise self.error(node, f"{fname}() takes floats")
        if fname in ACTIVATIONS:
            return ACTIVATIONS[fname](self, x)
        return self.add(FLOAT_UNARY[fname](x))

    def extremum(self, node: ast.Expr, fname: str, args: list[SSAValue]) -> SSAValue:
        lhs, rhs = self.promoted(*args)
        if lhs.type != rhs.type:
            raise self.error(
                node, f"{fname}() of {_type_name(lhs.type)} and {_type_name(rhs.type)}"
            )
        if lhs.type == f32:
            return self.add((arith.MinimumfOp if fname == "min" else arith.MaximumfOp)(lhs, rhs))
        return self.add((arith.MinSIOp if fname == "min" else arith.MaxSIOp)(lhs, rhs))

    def ceil_div(self, node: ast.Expr, fname: str, args: list[SSAValue]) -> SSAValue:
        a, b = (self.widened(v) if v.type == i32 else v for v in args)
        if a.type != self.index or b.type != self.index:
            raise self.error(node, "ceil_div() takes integers")
        one = self.const_int(1)
        return self.add(arith.DivSIOp(self.add(arith.SubiOp(self.add(arith.AddiOp(a, b)), one)), b))

    def select(self, node: ast.Expr, fname: str, args: list[SSAValue]) -> SSAValue:
        cond, (a, b) = args[0], self.promoted(*args[1:])
        if cond.type != i1 or a.type != b.type:
            raise self.error(
                node, "select(condition, a, b) needs a condition and two values of one type"
            )
        return self.add(arith.SelectOp(cond, a, b))

    def to_float(self, node: ast.Expr, fname: str, args: list[SSAValue]) -> SSAValue:
        if _integer_width(args[0].type) not in (8, 32, 64):
            raise self.error(node, "float() converts an integer")
        return self.add(arith.SIToFPOp(args[0], f32))

    def to_long(self, node: ast.Expr, fname: str, args: list[SSAValue]) -> SSAValue:
        width = _integer_width(args[0].type)
        if width not in (8, 32, 64):
            raise self.error(node, "long() widens an integer to 64 bits")
        return args[0] if width == 64 else self.add(arith.ExtSIOp(args[0], i64))

    def to_int(self, node: ast.Expr, fname: str, args: list[SSAValue]) -> SSAValue:
        (x,) = args
        if x.type == self.index:
            return x
        if x.type == f32:
            return self.add(arith.FPToSIOp(x, self.index))  # toward zero, as C casts
        width = _integer_width(x.type)
        if width not in (8, 32, 64):
            raise self.error(
                node,
                "int() converts a float, or an 8-bit or 64-bit integer (a mask's or an "
                "index tensor's element)",
            )
        if width < self.index.width.data:
            return self.add(arith.ExtSIOp(x, self.index))
        return self.add(arith.TruncIOp(x, self.index))

    def sizeof(self, node: ast.Call, arg_nodes: tuple[ast.Expr, ...]) -> int:
        if len(arg_nodes) != 1 or not isinstance(arg_nodes[0], ast.Name):
            raise self.error(node, "sizeof() takes a dtype name")
        dtype = self.key.get(arg_nodes[0].id)
        if not dtypes.is_storage(dtype):
            raise self.error(node, f"sizeof({arg_nodes[0].id}): not a dtype")
        return dtypes.lookup(dtype).bytes

    def group_reduce(self, node: ast.Call) -> list[SSAValue]:
        arg_nodes = node.args
        match arg_nodes:
            case (ast.Name() as kind_node, _, _, *_, ast.Name() as strategy_node):
                kind = kind_node.id
            case _:
                raise self.error(node, "group_reduce(kind, value..., group, strategy)")
        arity = kernel.REDUCE_KINDS.get(kind)
        if arity is None:
            raise self.error(
                kind_node,
                f"unknown reduction {kind!r}; one of {sorted(map(str, kernel.REDUCE_KINDS))}",
            )
        if len(arg_nodes) != arity + 3:
            raise self.error(node, f"reduction {kind} takes {arity} value(s)")
        strategy_fork = self.decl.fork(strategy_node.id)
        if strategy_fork is None or not strategy_fork.is_symbolic:
            raise self.error(strategy_node, "the reduction strategy must be a symbolic fork")
        unknown = set(map(str, strategy_fork.options)) - {s.value for s in kernel.ReduceStrategy}
        if unknown:
            raise self.error(strategy_node, f"unknown reduction strategy {sorted(unknown)[0]!r}")
        values = [self.expr(n) for n in arg_nodes[1:-2]]
        if any(v.type != f32 for v in values):
            raise self.error(node, "group_reduce reduces floats")
        group = self.narrow_expr(arg_nodes[-2])
        self.uses_reduction = True
        op = kernel.GroupReduceOp(
            kind,
            values,
            group,
            self.knobs[strategy_fork.name].result,
            list(map(str, strategy_fork.options)),
        )
        self.emit(op)
        return list(op.results)

    def elementwise_chain(self, node: ast.Call, arg_nodes: tuple[ast.Expr, ...]) -> SSAValue:
        """`fn(i)`: the key's chain `fn` over its inputs at element i. `fn(i, v, cols)`: the
        key's `epilogue` chain applied to v (called `acc` in the chain), its inputs read at
        element i of rows `cols` long (a fused epilogue of a kernel that computes v)."""
        if len(arg_nodes) not in (1, 3):
            raise self.error(
                node, "fn() takes the element index, or the index, the value and the row length"
            )
        index = self.int_expr(arg_nodes[0])
        key_name = "fn" if len(arg_nodes) == 1 else "epilogue"
        text = self.key.get(key_name)
        if not isinstance(text, str):
            raise self.error(node, f"fn() needs a key `{key_name}` with the chain of operations")
        chain = chain_tree(text, f"<{key_name} of the key>")
        # an epilogue's value (its `acc`), read before its row length, as the kernel wrote them
        accumulated = self.expr(arg_nodes[1]) if len(arg_nodes) == 3 else None
        if len(arg_nodes) == 3:
            cols = self.int_expr(arg_nodes[2])
        else:
            cols = self.const_int(int(self.key.get("cols", 1)))
        names: dict[str, SSAValue] = {}
        for i, kind in enumerate(self.input_kinds()):
            ptr = self.bound(f"in{i}")
            if kind == InputKind.FULL:
                offset = index
            elif kind == InputKind.ROW:
                offset = self.add(arith.RemSIOp(index, cols))
            elif kind == InputKind.COL:
                offset = self.add(arith.DivSIOp(index, cols))
            elif kind == InputKind.MIDDLE:
                inner = self.const_int(int(self.key.get("inner", 1)))
                run = self.add(arith.DivSIOp(index, inner))
                offset = self.add(arith.RemSIOp(run, self.const_int(int(self.key.get("mid", 1)))))
            elif kind == InputKind.BATCH:
                entry = int(self.key.get("inner", 1)) * int(self.key.get("mid", 1))
                offset = self.add(arith.RemSIOp(index, self.const_int(entry)))
            else:
                offset = self.const_int(0)
            names[f"in{i}"] = self.chain_input(ptr, offset)
        if accumulated is not None:
            names["acc"] = accumulated
            return ChainLowering(self, names).value(chain)
        stored = kernel.loaded_type(dtypes.xdsl_type(str(self.key["T"])))
        return ChainLowering(self, names).value(chain, stored)

    def chain_input(self, ptr: SSAValue, offset: SSAValue) -> SSAValue:
        """An input of a chain at `offset`: a bool (stored as a byte) is read as i1."""
        value = self.add(kernel.LoadOp(ptr, offset))
        if kernel.pointee(ptr) != i8:
            return value
        zero = self.add(arith.ConstantOp(IntegerAttr(0, i8)))
        return self.add(arith.CmpiOp(value, zero, "ne"))


def instantiate(decl: KernelDecl, key: Mapping[str, KeyValue], site_name: str) -> fork.SiteOp:
    """The site of `decl` for one problem key, with all its forks unresolved."""
    return Lowering(decl, key, site_name).site()


def _gelu(lowering: Lowering, x: SSAValue) -> SSAValue:
    add = lowering.add
    half = lowering.const_float(0.5)
    scaled = add(arith.MulfOp(x, lowering.const_float(0.7071067811865476)))
    one_plus = add(arith.AddfOp(lowering.const_float(1.0), add(xmath.ErfOp(scaled))))
    return add(arith.MulfOp(add(arith.MulfOp(half, x)), one_plus))


def _gelu_tanh(lowering: Lowering, x: SSAValue) -> SSAValue:
    add, c = lowering.add, lowering.const_float
    cube = add(arith.MulfOp(add(arith.MulfOp(x, x)), x))
    inner = add(
        arith.MulfOp(
            c(0.7978845608028654), add(arith.AddfOp(x, add(arith.MulfOp(c(0.044715), cube))))
        )
    )
    one_plus = add(arith.AddfOp(c(1.0), add(xmath.TanhOp(inner))))
    return add(arith.MulfOp(add(arith.MulfOp(c(0.5), x)), one_plus))


def _sigmoid(lowering: Lowering, x: SSAValue) -> SSAValue:
    add, c = lowering.add, lowering.const_float
    return add(
        arith.DivfOp(c(1.0), add(arith.AddfOp(c(1.0), add(xmath.ExpOp(add(arith.NegfOp(x)))))))
    )


def _silu(lowering: Lowering, x: SSAValue) -> SSAValue:
    return lowering.add(arith.MulfOp(x, _sigmoid(lowering, x)))


def _relu(lowering: Lowering, x: SSAValue) -> SSAValue:
    return lowering.add(arith.MaximumfOp(x, lowering.const_float(0.0)))


ACTIVATIONS: dict[str, Callable[[Lowering, SSAValue], SSAValue]] = {
    "gelu": _gelu,
    "gelu_tanh": _gelu_tanh,
    "sigmoid": _sigmoid,
    "silu": _silu,
    "relu": _relu,
}

#: the kernel language's functions of lowered values: each one's arity and lowering (the
#: functions of its syntax, `group_reduce`, `fn`, `sizeof` and the coordinates, are `call`'s)
BUILTINS: dict[str, tuple[int, Callable[[Lowering, ast.Expr, str, list[SSAValue]], SSAValue]]] = {
    **{name: (1, Lowering.float_function) for name in (*FLOAT_UNARY, *ACTIVATIONS)},
    "min": (2, Lowering.extremum),
    "max": (2, Lowering.extremum),
    "ceil_div": (2, Lowering.ceil_div),
    "select": (3, Lowering.select),
    "float": (1, Lowering.to_float),
    "long": (1, Lowering.to_long),
    "int": (1, Lowering.to_int),
}


def _integer_width(typ: Attribute) -> int:
    """The bits of an integer type (1 for a condition), 0 for a float."""
    return typ.width.data if isinstance(typ, IntegerType) else 0


def _type_name(typ: Attribute) -> str:
    if typ == i32:
        return "an integer"
    if typ == f32:
        return "a float"
    if isinstance(typ, IntegerType) and typ.width.data == 1:
        return "a condition"
    return str(typ)
