"""Build-time size cuts for the Linux bundle: trimmed ICU data, encoder stubs, an OpenBLAS shim.

Used by ``packaging/avatar_app.spec`` (Linux only). Four shared libraries of
the wheels are replaced by smaller ones made here with binutils (``as`` and
``ld``; no C compiler), 88 MB in all:

- ``libicudata.so.NN`` of PySide6 (32 MB -> 4.8 MB): ICU's data, of which Qt 6
  Core uses only collation (QCollator), time-zone ids and calendars
  (QTimeZone), case mapping and the converter alias table (QStringConverter).
  :func:`icu_keep` keeps those items; locale display names, currencies, units,
  break-iterator dictionaries, transliterators, table-based legacy code pages
  (``*.cnv``) and stringprep profiles go. ICU reports a missing item to its
  caller as an error and Qt falls back: QTimeZone long display names become
  empty, QStringDecoder("Shift_JIS") and other legacy code pages become
  invalid (UTF-8/16/32, Latin-1 and ASCII are algorithmic and stay). No
  avatar_app code uses either.
- PyAV's ``libx265`` (21 MB) and ``libSvtAv1Enc`` (7 MB): the HEVC and AV1
  *encoders*. avatar_app never encodes HEVC or AV1 (``avatar_app.record.formats``:
  libx264, mpeg4, ProRes, libvpx-vp9; no option lets a user pick another
  encoder), but libavcodec links both. The stubs export exactly the symbols
  libavcodec imports, with their C signatures, and fail the way the real
  libraries report failure: ``x265_api_get_NNN`` returns an API table whose
  ``param_alloc`` returns NULL (FFmpeg: "Could not allocate x265 param
  structure", ENOMEM), every ``svt_*`` function returns
  ``EB_ErrorUndefined``. Opening those encoders then fails with an FFmpeg
  error; every decoder (HEVC and AV1 decoding are FFmpeg's own / dav1d) and
  every other encoder is untouched.
- OpenCV's vendored OpenBLAS 0.3.3 (37 MB): replaced by
  ``shims/openblas_lp64_shim.s`` (15 kB), which exports the 19 LP64
  CBLAS/LAPACK functions cv2 imports and forwards them to the ILP64 OpenBLAS
  0.3.23 that numpy vendors (``*64_`` symbols), widening the integers. ABI:
  the LP64 signatures are unchanged for cv2; numpy's library is loaded
  anyway (cv2 imports numpy first). OpenCV's libgfortran.so.3, needed only by
  its OpenBLAS, goes too.

All parsing is pure Python (ELF64 little-endian, ICU common data "CmnD" table
of contents); the formats are documented in the System V gABI and in ICU's
``source/common/ucmndata.h`` / ``udata.cpp``. tests/packaging/test_packaging_slim.py
loads every generated library into a child Python with LD_PRELOAD and compares
what the app relies on with the originals.
"""
from __future__ import annotations

import functools
import logging
import re
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

SHT_DYNSYM = 11
SHN_UNDEF = 0
STT_FUNC = 2
STT_OBJECT = 1


class SlimError(RuntimeError):
    """A library could not be read or rebuilt; the spec then keeps the original."""


# --- ELF ---------------------------------------------------------------------


@dataclass(frozen=True)
class DynSymbol:
    """One entry of an ELF .dynsym table.

    Attributes:
        name: symbol name (no version suffix).
        kind: STT_* type (1 object, 2 function).
        defined: False for an import (st_shndx == SHN_UNDEF).
        value: st_value (virtual address).
        size: st_size in bytes.
        shndx: index of the section holding it.
    """

    name: str
    kind: int
    defined: bool
    value: int
    size: int
    shndx: int


def _sections(blob: bytes) -> list[tuple[int, int, int, int, int, int]]:
    """(sh_type, sh_addr, sh_offset, sh_size, sh_link, sh_entsize) of every section of an ELF64 LE file."""
    if blob[:4] != b"\x7fELF" or blob[4] != 2 or blob[5] != 1:
        raise SlimError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", blob, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", blob, 0x3A)
    out = []
    for i in range(shnum):
        (_name, sh_type, _flags, addr, off, size, link, _info, _align,
         entsize) = struct.unpack_from("<IIQQQQIIQQ", blob, shoff + i * shentsize)
        out.append((sh_type, addr, off, size, link, entsize))
    return out


def dynamic_symbols(path: Path) -> list[DynSymbol]:
    """The dynamic symbol table of a shared library.

    Args:
        path: an ELF64 little-endian shared object (x86-64 / aarch64 Linux).

    Returns:
        Every named .dynsym entry, imports and exports.

    Raises:
        SlimError: not such a file, or it has no .dynsym.
    """
    blob = Path(path).read_bytes()
    secs = _sections(blob)
    for sh_type, _addr, off, size, link, entsize in secs:
        if sh_type != SHT_DYNSYM:
            continue
        str_off = secs[link][2]
        syms = []
        for j in range(size // entsize):
            name_off, info, _other, shndx, value, sz = struct.unpack_from("<IBBHQQ", blob, off + j * entsize)
            if not name_off:
                continue
            end = blob.index(b"\0", str_off + name_off)
            name = blob[str_off + name_off:end].decode("ascii", "replace")
            syms.append(DynSymbol(name, info & 0xF, shndx != SHN_UNDEF, value, sz, shndx))
        return syms
    raise SlimError(f"{path}: no dynamic symbol table")


def symbol_bytes(path: Path, name: str) -> bytes:
    """The initialised bytes of an exported data symbol (e.g. ICU's ``icudt73_dat``).

    Raises:
        SlimError: the symbol is missing or not backed by file data.
    """
    blob = Path(path).read_bytes()
    secs = _sections(blob)
    for s in dynamic_symbols(path):
        if s.name == name and s.defined:
            _t, addr, off, size, _l, _e = secs[s.shndx]
            start = off + (s.value - addr)
            if not (addr <= s.value and s.value + s.size <= addr + size):
                raise SlimError(f"{path}: {name} lies outside its section")
            return blob[start:start + s.size]
    raise SlimError(f"{path}: no exported symbol {name}")


def soname_of(path: Path) -> str | None:
    """DT_SONAME of a shared library (None when it has none)."""
    out = subprocess.run(["readelf", "-dW", str(path)], capture_output=True, text=True, check=False).stdout
    m = re.search(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", out)
    return m.group(1) if m else None


# --- building libraries with binutils ----------------------------------------


def have_binutils() -> bool:
    """Whether GNU ``as`` and ``ld`` are on PATH (Debian/Ubuntu: the binutils package)."""
    return shutil.which("as") is not None and shutil.which("ld") is not None


def assemble_shared(asm: str, out: Path, soname: str) -> Path:
    """Assemble x86-64 GNU assembler text into a shared library.

    Args:
        asm: assembler source (AT&T syntax).
        out: the .so to write.
        soname: its DT_SONAME.

    Raises:
        SlimError: ``as`` or ``ld`` failed or is missing.
    """
    if not have_binutils():
        raise SlimError("GNU as/ld not found (install binutils)")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        src, obj = Path(tmp) / "lib.s", Path(tmp) / "lib.o"
        src.write_text(asm, encoding="ascii")
        for cmd in (["as", "--64", "-o", str(obj), str(src)],
                    ["ld", "-shared", "-soname", soname, "-z", "noexecstack", "--hash-style=both",
                     "-o", str(out), str(obj)]):
            r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, check=False)
            if r.returncode:
                raise SlimError(f"{cmd[0]} failed: {r.stderr.strip()[-500:]}")
    return out


# --- ICU common data ---------------------------------------------------------

_LOCALE_RES = re.compile(r"^[a-z]{2,3}(_[A-Za-z0-9]+)*\.res$")
ICU_DROP_TREES = ("brkitr", "curr", "lang", "rbnf", "region", "translit", "unit", "zone")
"""Trees Qt 6 never opens: break iterators (Qt segments text itself), locale display
names of currencies / languages / regions / units / zones, number spell-out rules,
transliterators. ``coll/`` (QCollator) stays whole."""
ICU_DROP_FILES = ("unames.icu", "confusables.cfu")
"""Character names (u_charName) and spoof-checker data: no ICU call of Qt uses them."""


def icu_keep(item: str) -> bool:
    """Whether an item of ICU's common data is kept (path below ``icudtNNl/``).

    Kept: ``coll/*`` (QCollator), ``root.res`` and every top-level non-locale
    resource (pool, supplementalData, likelySubtags, zoneinfo64, metaZones,
    timezoneTypes, windowsZones, ...: locale fallback, calendars and time zone
    ids for ucal_*), normalisation and property data, and ``cnvalias.icu`` (the
    converter name table; UTF-8/16/32, Latin-1 and ASCII are algorithmic).
    Dropped: see ICU_DROP_TREES and ICU_DROP_FILES, top-level locale bundles
    (``en.res``, ...: date/number formats, which Qt takes from its own CLDR
    tables), table-based legacy code pages (``*.cnv``) and stringprep (``*.spp``).
    """
    parts = item.split("/")
    if len(parts) > 1:
        return parts[0] not in ICU_DROP_TREES
    name = parts[0]
    if name in ICU_DROP_FILES or name.endswith((".cnv", ".spp")):
        return False
    return name == "root.res" or not _LOCALE_RES.match(name)


def filter_icu_common_data(data: bytes, keep: Callable[[str], bool] = icu_keep) -> tuple[bytes, list[str]]:
    """A copy of an ICU common data blob ("CmnD", table-of-contents format) with fewer items.

    Layout (ICU ``ucmndata.h``): a DataHeader (``headerSize``, magic 0xda27,
    UDataInfo with dataFormat "CmnD"), then at ``headerSize`` a uint32 count and
    ``count`` pairs (nameOffset, dataOffset) relative to the start of the table,
    item names ("icudt73l/coll/root.res") sorted bytewise (ICU looks them up by
    binary search), and the items, each 16-byte aligned.

    Args:
        data: the blob (e.g. :func:`symbol_bytes` of ``icudt73_dat``).
        keep: predicate on the item path without the ``icudtNNl/`` prefix.

    Returns:
        (new blob, names of the dropped items).

    Raises:
        SlimError: not little-endian CmnD data.
    """
    if len(data) < 32:
        raise SlimError("ICU data too short")
    header_size, magic1, magic2 = struct.unpack_from("<HBB", data, 0)
    if (magic1, magic2) != (0xDA, 0x27) or data[12:16] != b"CmnD" or data[8] != 0:
        raise SlimError("not little-endian ICU common data (CmnD)")
    toc = header_size
    count, = struct.unpack_from("<I", data, toc)
    entries = [struct.unpack_from("<II", data, toc + 4 + 8 * i) for i in range(count)]
    names = []
    for name_off, _ in entries:
        end = data.index(b"\0", toc + name_off)
        names.append(data[toc + name_off:end])
    bounds = [d for _, d in entries] + [len(data) - toc]
    kept, dropped = [], []
    for i, raw in enumerate(names):
        item = raw.decode("ascii").split("/", 1)[-1]
        (kept if keep(item) else dropped).append(i)
    kept.sort(key=lambda i: names[i])  # bytewise order for ICU's binary search
    name_blob = bytearray()
    name_offs = []
    base = 4 + 8 * len(kept)
    for i in kept:
        name_offs.append(base + len(name_blob))
        name_blob += names[i] + b"\0"
    pos = base + len(name_blob)
    pad = (-(toc + pos)) % 16
    pos += pad
    items, data_offs = bytearray(), []
    for i in kept:
        chunk = data[toc + entries[i][1]: toc + bounds[i + 1]]
        data_offs.append(pos + len(items))
        items += chunk
        items += b"\xaa" * ((-len(items)) % 16)
    out = bytearray(data[:header_size])
    out += struct.pack("<I", len(kept))
    for n, d in zip(name_offs, data_offs):
        out += struct.pack("<II", n, d)
    out += name_blob + b"\xaa" * pad + items  # icupkg pads with 0xaa
    return bytes(out), [names[i].decode("ascii") for i in dropped]


def build_icu_data_library(original: Path, out: Path, keep: Callable[[str], bool] = icu_keep) -> Path:
    """Write a trimmed copy of ``libicudata.so.NN`` (same SONAME and data symbol).

    Args:
        original: the wheel's libicudata.so.NN.
        out: where to write the new library.
        keep: item predicate (see :func:`icu_keep`).

    Raises:
        SlimError: unexpected library layout, or binutils missing.
    """
    syms = [s for s in dynamic_symbols(original) if s.defined and re.fullmatch(r"icudt\d+_dat", s.name)]
    if len(syms) != 1:
        raise SlimError(f"{original}: expected one icudtNN_dat symbol, found {[s.name for s in syms]}")
    sym = syms[0].name
    data, dropped = filter_icu_common_data(symbol_bytes(original, sym), keep)
    with tempfile.TemporaryDirectory() as tmp:
        dat = Path(tmp) / "icu.dat"
        dat.write_bytes(data)
        asm = (f'\t.section .rodata\n\t.globl {sym}\n\t.type {sym}, @object\n\t.balign 16\n{sym}:\n'
               f'\t.incbin "{dat}"\n\t.size {sym}, . - {sym}\n')
        assemble_shared(asm, out, soname_of(original) or Path(original).name)
    log.info("ICU data %s: %d -> %d bytes (%d items dropped)", Path(original).name,
             Path(original).stat().st_size, Path(out).stat().st_size, len(dropped))
    return Path(out)


# --- encoder stubs -------------------------------------------------------------

EB_ERROR_UNDEFINED = 0x80001001
"""SVT-AV1 ``EB_ErrorUndefined`` (Source/API/EbSvtAv1.h), returned by every stubbed svt_* call."""
X265_API_SLOTS = 256
"""Function-pointer slots in the stub x265_api table (x265 4.x has about 50; all point to one
function returning 0/NULL)."""


def _imported_from(consumer: Path, provider: Path) -> list[DynSymbol]:
    """Symbols ``consumer`` imports that ``provider`` exports."""
    exported = {s.name: s for s in dynamic_symbols(provider) if s.defined}
    return sorted({exported[s.name] for s in dynamic_symbols(consumer)
                   if not s.defined and s.name in exported}, key=lambda s: s.name)


def x265_stub_asm(symbols: Iterable[DynSymbol]) -> str:
    """Assembler for a libx265 stand-in.

    ``x265_api_get_NNN(int bit_depth)`` returns a static ``x265_api`` (x265.h)
    whose integer header is zero except ``bit_depth`` = 8, whose strings say
    what this is, and whose function pointers all return 0 (NULL): FFmpeg's
    ``libx265_encode_init`` then fails at ``param_alloc() == NULL`` and its
    close callback calls ``param_free(NULL)`` harmlessly.

    Raises:
        SlimError: libavcodec imports something other than x265_api_get_*.
    """
    names = [s.name for s in symbols]
    if not names or any(not re.fullmatch(r"x265_api_get_\d+", n) for n in names):
        raise SlimError(f"unexpected x265 imports {names}; not stubbing")
    lines = ["\t.text"]
    for n in names:
        lines += [f"\t.globl {n}", f"\t.type {n}, @function", f"{n}:",
                  "\tleaq x265_stub_api(%rip), %rax", "\tret", f"\t.size {n}, . - {n}"]
    lines += ["x265_stub_zero:", "\txorl %eax, %eax", "\tret",
              "\t.section .rodata", "x265_stub_msg:",
              '\t.asciz "libx265 is not included in the avatar-app bundle"',
              "\t.section .data.rel.ro, \"aw\"", "\t.balign 16", "x265_stub_api:",
              "\t.long 0, 0, 0, 0, 0, 0, 0, 8",
              "\t.quad x265_stub_msg, x265_stub_msg",
              f"\t.rept {X265_API_SLOTS}", "\t.quad x265_stub_zero", "\t.endr", ""]
    return "\n".join(lines)


def svt_stub_asm(symbols: Iterable[DynSymbol]) -> str:
    """Assembler for a libSvtAv1Enc stand-in: every imported function returns EB_ErrorUndefined.

    The imports are EbErrorType/int functions and one void function
    (``svt_metadata_array_free``); FFmpeg's ``eb_enc_init`` stops at the
    failing ``svt_av1_enc_init_handle`` and its close skips the NULL handle.

    Raises:
        SlimError: an import is not a function.
    """
    syms = list(symbols)
    if not syms or any(s.kind != STT_FUNC or not s.name.startswith("svt_") for s in syms):
        raise SlimError(f"unexpected SVT-AV1 imports {[s.name for s in syms]}; not stubbing")
    lines = ["\t.text"]
    for s in syms:
        lines += [f"\t.globl {s.name}", f"\t.type {s.name}, @function", f"{s.name}:",
                  f"\tmovl ${EB_ERROR_UNDEFINED:#x}, %eax", "\tret", f"\t.size {s.name}, . - {s.name}"]
    return "\n".join(lines) + "\n"


STUBS: dict[str, Callable[[Iterable[DynSymbol]], str]] = {"libx265": x265_stub_asm, "libSvtAv1Enc": svt_stub_asm}
"""Library name prefix (as vendored by auditwheel: ``libx265-<hash>.so.NNN``) -> stub generator."""


def build_stub(real: Path, consumer: Path, out: Path) -> Path:
    """A stand-in for ``real`` exporting what ``consumer`` imports from it (see :data:`STUBS`).

    Raises:
        SlimError: no stub generator for it, unexpected imports, or binutils missing.
    """
    prefix = Path(real).name.split("-")[0].split(".so")[0]
    if prefix not in STUBS:
        raise SlimError(f"no stub for {Path(real).name}")
    asm = STUBS[prefix](_imported_from(consumer, real))
    assemble_shared(asm, out, soname_of(real) or Path(real).name)
    log.info("stub %s: %d -> %d bytes", Path(real).name, Path(real).stat().st_size, Path(out).stat().st_size)
    return Path(out)


# --- OpenCV's OpenBLAS -> numpy's ------------------------------------------------

SHIM_DIR = Path(__file__).resolve().parent / "shims"
OPENBLAS_SHIM_ASM = SHIM_DIR / "openblas_lp64_shim.s"
"""gcc -O2 -fPIC output of openblas_lp64_shim.c (its header has the command): assembling
it needs only binutils."""


def _asm_symbols(asm: str) -> tuple[set[str], set[str]]:
    """(exported, called) symbol names of a gcc-generated x86-64 assembler file."""
    exported = set(re.findall(r"^\s*\.globl\s+(\S+)", asm, re.M))
    called = set(re.findall(r"\b(?:call|jmp)\s+([A-Za-z_][\w.]*)@PLT", asm))
    return exported, called


def build_openblas_shim(opencv_blas: Path, numpy_blas: Path, consumers: Iterable[Path], out: Path,
                        numpy_dir_from_out: str) -> Path:
    """A stand-in for OpenCV's vendored OpenBLAS that forwards to numpy's ILP64 OpenBLAS.

    The shim (packaging/shims/openblas_lp64_shim.c) exports the LP64 CBLAS/LAPACK
    functions cv2 imports and calls numpy's ``*64_`` functions with widened integers.

    Args:
        opencv_blas: ``opencv_*.libs/libopenblas-*.so`` (its SONAME is reused).
        numpy_blas: ``numpy.libs/libopenblas64_*.so`` (becomes DT_NEEDED).
        consumers: every bundled library that needs ``opencv_blas`` (cv2.abi3.so).
        out: where to write the shim.
        numpy_dir_from_out: numpy_blas's folder relative to the shim's folder in the
            bundle (RUNPATH ``$ORIGIN/<this>``).

    Raises:
        SlimError: a consumer imports something the shim lacks, numpy's library lacks
            a forwarded function, or binutils is missing.
    """
    asm = OPENBLAS_SHIM_ASM.read_text(encoding="ascii")
    exported, called = _asm_symbols(asm)
    wanted = {s.name for c in consumers for s in _imported_from(Path(c), Path(opencv_blas))}
    if not wanted or wanted - exported:
        raise SlimError(f"cv2 imports {sorted(wanted - exported) or 'nothing'} from OpenBLAS beyond the shim")
    numpy_exports = {s.name for s in dynamic_symbols(numpy_blas) if s.defined}
    missing = {c for c in called if c not in ("malloc", "free")} - numpy_exports
    if missing:
        raise SlimError(f"{Path(numpy_blas).name} lacks {sorted(missing)}")
    if not have_binutils():
        raise SlimError("GNU as/ld not found (install binutils)")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        obj = Path(tmp) / "shim.o"
        for cmd in (["as", "--64", "-o", str(obj), str(OPENBLAS_SHIM_ASM)],
                    ["ld", "-shared", "-soname", soname_of(opencv_blas) or Path(opencv_blas).name,
                     "-z", "noexecstack", "--hash-style=both", "--enable-new-dtags",
                     "-rpath", f"$ORIGIN/{numpy_dir_from_out}", "-o", str(out), str(obj), str(numpy_blas)]):
            r = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if r.returncode:
                raise SlimError(f"{cmd[0]} failed: {r.stderr.strip()[-500:]}")
    log.info("OpenBLAS shim %s: %d -> %d bytes", Path(opencv_blas).name, Path(opencv_blas).stat().st_size,
             out.stat().st_size)
    return out


@functools.lru_cache(maxsize=None)
def needed_of(path: Path) -> tuple[str, ...]:
    """DT_NEEDED entries of a shared library (readelf; empty for a non-ELF file)."""
    out = subprocess.run(["readelf", "-dW", str(path)], capture_output=True, text=True, check=False).stdout
    return tuple(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out))


# --- applying the cuts to PyInstaller's TOC ------------------------------------


def slim_binaries(binaries: list[tuple], gen_dir: Path) -> tuple[list[tuple], list[str]]:
    """Apply the cuts of this module to a PyInstaller binaries TOC.

    Replaces PySide6's libicudata (trimmed data), PyAV's libx265 / libSvtAv1Enc
    (encoder stubs) and OpenCV's vendored OpenBLAS (shim onto numpy's), then
    drops vendored libraries (``*.libs/``) that only the replaced ones needed
    (OpenCV's libgfortran.so.3 and libquadmath). Entries are (dest_name,
    src_path, typecode). A library that cannot be rebuilt (no binutils, an
    unexpected wheel) is kept as it is and reported.

    Args:
        binaries: ``Analysis.binaries``.
        gen_dir: folder for the generated libraries.

    Returns:
        (new TOC, one line per library: what was done or why not).
    """
    gen_dir = Path(gen_dir)
    entries = {d.replace("\\", "/"): s for d, s, _t in binaries}

    def find(pred) -> str | None:
        return next((d for d in entries if pred(d)), None)

    avcodec = find(lambda d: d.startswith("av.libs/libavcodec-"))
    numpy_blas = find(lambda d: d.startswith("numpy.libs/libopenblas64_"))
    replace: dict[str, Path] = {}
    notes = []
    for dest, src in entries.items():
        name = Path(dest).name
        try:
            if re.fullmatch(r"libicudata\.so\.\d+", name) and dest.startswith("PySide6/"):
                replace[dest] = build_icu_data_library(Path(src), gen_dir / "icu" / name)
            elif dest.startswith("av.libs/") and name.split("-")[0] in STUBS and avcodec:
                replace[dest] = build_stub(Path(src), Path(entries[avcodec]), gen_dir / "stubs" / name)
            elif (dest.startswith("opencv_") and ".libs/" in dest and name.startswith("libopenblas")
                  and numpy_blas):
                users = [entries[d] for d in entries if d != dest and name in needed_of(Path(entries[d]))]
                # RUNPATH from the shim's folder to numpy's: "../numpy.libs" in the bundle
                rel = Path(*([".."] * len(Path(dest).parent.parts))) / Path(numpy_blas).parent
                replace[dest] = build_openblas_shim(Path(src), Path(entries[numpy_blas]), users,
                                                    gen_dir / "blas" / name, rel.as_posix())
            else:
                continue
            notes.append(f"{dest}: {Path(src).stat().st_size} -> {replace[dest].stat().st_size} bytes")
        except (SlimError, OSError) as e:
            notes.append(f"{dest}: kept as is ({e})")
            log.warning("bundle size: %s kept as is: %s", dest, e)
    out = [(d, str(replace[d.replace("\\", "/")]) if d.replace("\\", "/") in replace else s, t)
           for d, s, t in binaries]
    # vendored libraries nothing needs any more (to a fixed point: libgfortran -> libquadmath)
    kept = out
    candidates = {n for d in replace for n in needed_of(Path(entries[d]))}
    while True:
        still = {n for _d, s, _t in kept for n in needed_of(Path(s))}
        drop = [(d, s) for d, s, _t in kept if Path(d).name in candidates - still
                and ".libs/" in d.replace("\\", "/") and d.replace("\\", "/") not in replace]
        if not drop:
            break
        for d, s in drop:
            notes.append(f"{d}: dropped ({Path(s).stat().st_size} bytes), only replaced libraries needed it")
            candidates |= set(needed_of(Path(s)))
        gone = {d for d, _s in drop}
        kept = [e for e in kept if e[0] not in gone]
    return kept, notes
