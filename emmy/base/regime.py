"""Regimes: the canonical code-generation flags (plus the arch) a kernel is compiled under.

This is the one place where flag spellings are normalised. Two flag lists that produce the
same code must give the same `Regime.id`, so recalled choices and cached cubins are shared:
aliases are spelled one way, single-valued options keep their last value, flags that cannot
change the code are dropped, and the result is sorted (every token is order-free once
duplicates are resolved). Flags that NVRTC refuses, or that are not about code generation,
are rejected up front with a one-line EmmyError rather than surfacing as a compile log.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from emmy.base.errors import EmmyError
from emmy.base.identity import EMU, arch_of

#: the flag set that deploys: NVRTC's defaults, which already optimise at O3
DEPLOYABLE_FLAGS: tuple[str, ...] = ()
#: the "arch" of the emulator, which compiles the same source with the host's g++
HOST_ARCH = "host"

_BOOL = ("true", "false")

#: bare option name (any alias, leading dashes stripped) -> canonical long name
_ALIASES = {
    "use_fast_math": "use_fast_math",
    "extra-device-vectorization": "extra-device-vectorization",
    "restrict": "restrict",
    "G": "device-debug",
    "device-debug": "device-debug",
    "lineinfo": "generate-line-info",
    "generate-line-info": "generate-line-info",
    "maxrregcount": "maxrregcount",
    "ftz": "ftz",
    "prec-div": "prec-div",
    "prec-sqrt": "prec-sqrt",
    "fmad": "fmad",
    "dopt": "dopt",
    "Ofast-compile": "Ofast-compile",
    "D": "define-macro",
    "define-macro": "define-macro",
    "Xnvvm": "Xnvvm",
    "Xptxas": "ptxas-options",
    "ptxas-options": "ptxas-options",
    "arch": "gpu-architecture",
    "gpu-architecture": "gpu-architecture",
    "std": "std",
    "default-device": "default-device",
    "w": "disable-warnings",
    "disable-warnings": "disable-warnings",
}

_SWITCHES = {
    "use_fast_math",
    "extra-device-vectorization",
    "restrict",
    "device-debug",
    "generate-line-info",
    "default-device",
    "disable-warnings",
}

#: single-valued options and the values NVRTC takes for them (None: a non-negative integer)
_VALUED: dict[str, tuple[str, ...] | None] = {
    "maxrregcount": None,
    "ftz": _BOOL,
    "prec-div": _BOOL,
    "prec-sqrt": _BOOL,
    "fmad": _BOOL,
    "dopt": ("on", "off"),
    "Ofast-compile": ("0", "min", "mid", "max"),
}

_O_LEVEL = re.compile(r"-O\d*")
_ARCH = re.compile(r"sm_\d{2,3}[af]?")
_NVVM_OPT = re.compile(r"-opt=(\d+)")
_PTXAS_OPT = re.compile(r"-O(\d)")
#: ptxas options that only change what ptxas prints
_PTXAS_QUIET = {
    "-v",
    "--verbose",
    "-warn-spills",
    "--warn-on-spills",
    "-warn-lmem-usage",
    "--warn-on-local-memory-usage",
    "-warn-double-usage",
    "--warn-on-double-precision-use",
}


def _refuse_o_level(token: str) -> EmmyError:
    return EmmyError(
        f"flag {token!r} is not accepted: NVRTC rejects -O levels because it already optimises"
        " at O3 (NVVM and ptxas) by default; spell a lower level as '-Xnvvm -opt=N' or"
        " '--ptxas-options=-ON'"
    )


def _split(flags: str | Sequence[str]) -> list[str]:
    if isinstance(flags, str):
        try:
            return shlex.split(flags)
        except ValueError as e:
            raise EmmyError(f"cannot parse flags {flags!r}: {e}") from None
    return [str(f) for f in flags]


def _options(tokens: list[str]) -> Iterator[tuple[str, str, str]]:
    """(token as written, canonical option, value) per option of a flag list; a valued
    option written `name value` spans two tokens, shown joined."""
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if _O_LEVEL.fullmatch(token):
            raise _refuse_o_level(token)
        if not token.startswith("-") or token in ("-", "--"):
            raise EmmyError(f"flag {token!r} is not an option (options start with '-')")
        body = token.lstrip("-")
        # -DNAME is glued; every other option is `name`, `name=value` or `name value`
        if token.startswith("-D") and not token.startswith("--") and body not in _ALIASES:
            yield token, _ALIASES["D"], body[1:]
            continue
        name, eq, value = body.partition("=")
        if name not in _ALIASES:
            raise EmmyError(f"flag {token!r} is not a code-generation flag emmy accepts")
        option = _ALIASES[name]
        if option in _SWITCHES and eq:
            raise EmmyError(f"flag {token!r} takes no value")
        if option not in _SWITCHES and not eq:
            if i == len(tokens):
                raise EmmyError(f"flag {token!r} needs a value")
            value = tokens[i]
            i += 1
            token = f"{token} {value}"
        yield token, option, value


@dataclass
class _CanonicalFlags:
    """The options of a flag list read so far, each kept in its canonical token."""

    switches: set[str] = field(default_factory=set)
    valued: dict[str, str] = field(default_factory=dict)  # option -> last value
    defines: dict[str, str] = field(default_factory=dict)  # macro -> token, last wins
    nvvm: dict[str, str] = field(default_factory=dict)  # NVVM option key -> token
    ptxas: dict[str, str] = field(default_factory=dict)  # ptxas option key -> token

    def add(self, token: str, option: str, value: str) -> None:
        if option in _SWITCHES:
            self._add_switch(option)
        elif option in _VALUED:
            self._add_valued(token, option, value)
        elif option == "define-macro":
            self._add_define(token, value)
        elif option == "Xnvvm":
            self._add_nvvm(token, value)
        elif option == "ptxas-options":
            self._add_ptxas(token, value)
        elif option == "gpu-architecture":
            raise EmmyError(
                f"flag {token!r} is not accepted: the arch is part of the regime, not its flags"
            )
        elif option == "std" and value != "c++17":
            raise EmmyError(f"flag {token!r} is not accepted: emmy compiles kernels as c++17")

    def _add_switch(self, option: str) -> None:
        # -default-device is always passed, warnings do not change code
        if option not in ("default-device", "disable-warnings"):
            self.switches.add(option)

    def _add_valued(self, token: str, option: str, value: str) -> None:
        allowed = _VALUED[option]
        ok = value.isdigit() if allowed is None else value in allowed
        if not ok:
            want = "a non-negative integer" if allowed is None else "|".join(allowed)
            raise EmmyError(f"flag {token!r}: --{option} takes {want}, not {value!r}")
        self.valued[option] = value

    def _add_define(self, token: str, value: str) -> None:
        macro = value.partition("=")[0]
        if not re.fullmatch(r"[A-Za-z_]\w*", macro):
            raise EmmyError(f"flag {token!r}: {macro!r} is not a macro name")
        self.defines[macro] = f"-D{value}"

    def _add_nvvm(self, token: str, value: str) -> None:
        for part in filter(None, value.split(",")):
            m = _NVVM_OPT.fullmatch(part)
            if m and int(m.group(1)) > 3:
                raise EmmyError(f"flag {token!r}: NVVM takes -opt=0..3")
            self.nvvm[part.partition("=")[0]] = f"-Xnvvm={part}"

    def _add_ptxas(self, token: str, value: str) -> None:
        # NVRTC hands a comma list to ptxas whole, which ptxas misreads: one per token
        for part in filter(None, value.split(",")):
            if part in _PTXAS_QUIET:
                continue
            if _O_LEVEL.fullmatch(part) and not _PTXAS_OPT.fullmatch(part):
                raise EmmyError(f"flag {token!r}: ptxas takes -O0..-O3")
            key = "-O" if _PTXAS_OPT.fullmatch(part) else part.partition("=")[0]
            self.ptxas[key] = f"--ptxas-options={part}"

    def tokens(self) -> tuple[str, ...]:
        """The sorted canonical tokens, less the defaults NVRTC already applies (they do not
        change the code)."""
        if self.nvvm.get("-opt") == "-Xnvvm=-opt=3":
            del self.nvvm["-opt"]
        if self.ptxas.get("-O") == "--ptxas-options=-O3":
            del self.ptxas["-O"]
        if self.valued.get("Ofast-compile") == "0":
            del self.valued["Ofast-compile"]
        out = [f"--{s}" for s in self.switches]
        out += [f"--{k}={v}" for k, v in self.valued.items()]
        out += [*self.defines.values(), *self.nvvm.values(), *self.ptxas.values()]
        return tuple(sorted(out))


def normalise_flags(flags: str | Sequence[str]) -> tuple[str, ...]:
    """The canonical spelling of a flag list: one token per option, sorted, defaults dropped."""
    canonical = _CanonicalFlags()
    for token, option, value in _options(_split(flags)):
        canonical.add(token, option, value)
    return canonical.tokens()


@dataclass(frozen=True)
class Regime:
    """The code-generation flags and the arch a kernel is compiled under.

    Flags are normalised on construction, so equal regimes compare and hash equal.
    """

    flags: tuple[str, ...]
    arch: str

    def __post_init__(self) -> None:
        if self.arch != HOST_ARCH and not _ARCH.fullmatch(self.arch):
            raise EmmyError(f"arch {self.arch!r} is not a real GPU arch such as 'sm_90'")
        object.__setattr__(self, "flags", normalise_flags(self.flags))

    @classmethod
    def deployable(cls, arch: str) -> Regime:
        return cls(DEPLOYABLE_FLAGS, arch)

    @property
    def canonical(self) -> str:
        """The text the id hashes: the arch, then one flag a line."""
        return "\n".join((self.arch, *self.flags))

    @property
    def id(self) -> str:
        return "r-" + hashlib.sha256(self.canonical.encode()).hexdigest()[:12]

    @property
    def words(self) -> str:
        if self.flags:
            return " ".join(self.flags)
        return "emulator default (g++ -O2)" if self.arch == HOST_ARCH else "nvrtc default (-O3)"

    @property
    def is_deployable(self) -> bool:
        return self.flags == DEPLOYABLE_FLAGS


def regime_for(device: str, flags: str | Sequence[str] = DEPLOYABLE_FLAGS) -> Regime:
    """The regime of a device identity ("emu" or a GPU slug) under the given flags."""
    arch = HOST_ARCH if device == EMU else arch_of(device)
    return Regime(normalise_flags(flags), arch)


def host_compiler_flags(regime: Regime) -> tuple[str, ...]:
    """The g++ flags that give the emulator the regime's meaning where one exists:
    NVVM's optimisation level becomes g++'s, macros stay macros; any other flag is refused,
    because the emulator could not honour it and its rows would lie about their regime."""
    out: list[str] = []
    for flag in regime.flags:
        level = re.fullmatch(r"-Xnvvm=-opt=(\d)", flag)
        if level:
            out.append(f"-O{level.group(1)}")
        elif flag.startswith("-D"):
            out.append(flag)
        else:
            raise EmmyError(
                f"flag {flag!r} has no meaning on the emulator (it takes -Xnvvm -opt=N and -D)"
            )
    return tuple(out)
