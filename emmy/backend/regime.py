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
from collections.abc import Sequence
from dataclasses import dataclass

from emmy.errors import EmmyError
from emmy.identity import EMU, arch_of

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


def normalise_flags(flags: str | Sequence[str]) -> tuple[str, ...]:
    """The canonical spelling of a flag list: one token per option, sorted, defaults dropped."""
    tokens = _split(flags)
    valued: dict[str, str] = {}  # option -> last value
    switches: set[str] = set()
    defines: dict[str, str] = {}  # macro name -> canonical token, last definition wins
    nvvm: dict[str, str] = {}  # NVVM option key -> canonical token
    ptxas: dict[str, str] = {}  # ptxas option key -> canonical token
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
            name, value = "D", body[1:]
        else:
            name, eq, value = body.partition("=")
            if name not in _ALIASES:
                raise EmmyError(f"flag {token!r} is not a code-generation flag emmy accepts")
            if _ALIASES[name] not in _SWITCHES and not eq:
                if i == len(tokens):
                    raise EmmyError(f"flag {token!r} needs a value")
                value = tokens[i]
                i += 1
                token = f"{token} {value}"
            elif _ALIASES[name] in _SWITCHES and eq:
                raise EmmyError(f"flag {token!r} takes no value")
        option = _ALIASES[name]
        if option in _SWITCHES:
            # -default-device is always passed, warnings do not change code
            if option not in ("default-device", "disable-warnings"):
                switches.add(option)
        elif option in _VALUED:
            allowed = _VALUED[option]
            ok = value.isdigit() if allowed is None else value in allowed
            if not ok:
                want = "a non-negative integer" if allowed is None else "|".join(allowed)
                raise EmmyError(f"flag {token!r}: --{option} takes {want}, not {value!r}")
            valued[option] = value
        elif option == "define-macro":
            macro = value.partition("=")[0]
            if not re.fullmatch(r"[A-Za-z_]\w*", macro):
                raise EmmyError(f"flag {token!r}: {macro!r} is not a macro name")
            defines[macro] = f"-D{value}"
        elif option == "Xnvvm":
            for part in filter(None, value.split(",")):
                m = _NVVM_OPT.fullmatch(part)
                if m and int(m.group(1)) > 3:
                    raise EmmyError(f"flag {token!r}: NVVM takes -opt=0..3")
                nvvm[part.partition("=")[0]] = f"-Xnvvm={part}"
        elif option == "ptxas-options":
            # NVRTC hands a comma list to ptxas whole, which ptxas misreads: one per token
            for part in filter(None, value.split(",")):
                if part in _PTXAS_QUIET:
                    continue
                if _O_LEVEL.fullmatch(part) and not _PTXAS_OPT.fullmatch(part):
                    raise EmmyError(f"flag {token!r}: ptxas takes -O0..-O3")
                key = "-O" if _PTXAS_OPT.fullmatch(part) else part.partition("=")[0]
                ptxas[key] = f"--ptxas-options={part}"
        elif option == "gpu-architecture":
            raise EmmyError(
                f"flag {token!r} is not accepted: the arch is part of the regime, not its flags"
            )
        elif option == "std":
            if value != "c++17":
                raise EmmyError(f"flag {token!r} is not accepted: emmy compiles kernels as c++17")
    # the defaults NVRTC already applies do not change the code
    if nvvm.get("-opt") == "-Xnvvm=-opt=3":
        del nvvm["-opt"]
    if ptxas.get("-O") == "--ptxas-options=-O3":
        del ptxas["-O"]
    if valued.get("Ofast-compile") == "0":
        del valued["Ofast-compile"]
    out = [f"--{s}" for s in switches]
    out += [f"--{k}={v}" for k, v in valued.items()]
    out += [*defines.values(), *nvvm.values(), *ptxas.values()]
    return tuple(sorted(out))


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
    return Regime(flags, HOST_ARCH if device == EMU else arch_of(device))


def host_compiler_flags(regime: Regime) -> tuple[str, ...]:
    """The g++ flags that give the emulator the regime's meaning where one exists:
    NVVM's optimisation level becomes g++'s, macros stay macros; any other flag is refused,
    because the emulator could not honour it and its rows would lie about their regime."""
    out = []
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
