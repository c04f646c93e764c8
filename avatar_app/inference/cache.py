"""Engine cache in the user cache directory.

One entry per (ONNX sha256, precision, backend and version, device, optimisation
profile, calibration variant), a folder under ``<user cache>/engines/`` with
the engine artifact (a TensorRT plan, or the precision's ONNX file for ONNX
Runtime) and ``manifest.json`` (plan sha256, build time, verification errors).
The manifest is written last, so an entry without one is incomplete.

An entry is checked before use: manifest schema and key, artifact size and
sha256 (and the runtime's own validity check for plans, done by the backend).
Corrupt, truncated and foreign-version entries are removed and rebuilt.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from avatar_app.inference.dirs import user_cache_dir
from avatar_app.inference.modelinfo import sha256_file
from avatar_app.inference.verify import VerificationResult

logger = logging.getLogger(__name__)

#: Manifest format version; entries written by another version are rebuilt.
MANIFEST_SCHEMA = 1
MANIFEST_NAME = "manifest.json"


@dataclass(frozen=True)
class CacheKey:
    """What makes two engines interchangeable.

    Attributes:
        onnx_sha256: hex SHA-256 of the source FP32 ONNX file.
        precision: ``"fp32"``, ``"fp16"`` or ``"int8"``.
        backend: registry name (``"ort_cpu"``, ``"tensorrt_rtx"``).
        backend_version: version of the runtime library that built it.
        device: GPU name and compute capability (``"NVIDIA GeForce RTX 4070 sm89"``) or ``"cpu"``.
        profile: optimisation profile text (JSON) or ``""``.
        variant: calibration fingerprint for INT8 (``""`` otherwise).
    """

    onnx_sha256: str
    precision: str
    backend: str
    backend_version: str
    device: str
    profile: str = ""
    variant: str = ""

    def digest(self) -> str:
        """Hex SHA-256 of the key's canonical JSON (first 20 characters)."""
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:20]


@dataclass
class Manifest:
    """Contents of ``manifest.json``.

    Attributes:
        key: the :class:`CacheKey` as a dict.
        model_name: source model stem.
        artifact: file name of the engine in the entry folder.
        artifact_sha256 / artifact_size: checked before every load.
        build_time_s: seconds the conversion and build took.
        built_at: UNIX time of the build.
        status: ``"ok"`` (verified), ``"rejected"`` (failed verification),
            or ``"unverified"`` (built but cannot run on this machine).
        reason: why not ``"ok"``.
        verification: :meth:`VerificationResult.to_json` or None.
        load_checked: the first load succeeded in a child process.
        details: backend-specific build facts (parser warnings, layers, profile).
        schema: :data:`MANIFEST_SCHEMA`.
    """

    key: dict
    model_name: str
    artifact: str
    artifact_sha256: str
    artifact_size: int
    build_time_s: float
    built_at: float = field(default_factory=time.time)
    status: str = "ok"
    reason: str = ""
    verification: dict | None = None
    load_checked: bool = False
    details: dict = field(default_factory=dict)
    schema: int = MANIFEST_SCHEMA

    @property
    def verification_result(self) -> VerificationResult | None:
        """The verification as an object (None when it was not run)."""
        return VerificationResult.from_json(self.verification) if self.verification else None


@dataclass
class BuildFailure:
    """A build of one cache key that failed, remembered so that the next start does not repeat it.

    Stored as ``<cache root>/failures/<entry folder name>.json``. A new model file,
    backend version or device is a new key, and is built again.

    Attributes:
        key: the :class:`CacheKey` as a dict.
        model_name: source model stem.
        reason: the build's error message.
        when: UNIX time of the failure.
        error: the exception's class name (``EngineBuildError``, ``ChildCrashError``...).
    """

    key: dict
    model_name: str
    reason: str
    when: float = field(default_factory=time.time)
    error: str = ""


@dataclass
class CacheEntry:
    """A checked cache entry."""

    folder: Path
    manifest: Manifest

    @property
    def artifact_path(self) -> Path:
        """The engine file."""
        return self.folder / self.manifest.artifact


class EngineCache:
    """The engine cache folder.

    Args:
        root: cache root (default :func:`~avatar_app.inference.dirs.user_cache_dir`);
            engines live in ``root/engines``.
    """

    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else user_cache_dir()
        self.engines_dir = self.root / "engines"

    def folder_for(self, key: CacheKey, model_name: str) -> Path:
        """Entry folder of ``key``: ``<model>-<precision>-<backend>-<digest>``."""
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in model_name)
        return self.engines_dir / f"{safe}-{key.precision}-{key.backend}-{key.digest()}"

    def lookup(self, key: CacheKey, model_name: str) -> CacheEntry | None:
        """The valid entry for ``key``; an invalid one is removed and None returned."""
        folder = self.folder_for(key, model_name)
        if not folder.exists():
            return None
        entry, problem = self._check(folder, key)
        if problem:
            logger.warning("engine cache entry %s is unusable (%s); it will be rebuilt", folder.name, problem)
            self.remove(folder)
            return None
        return entry

    def _check(self, folder: Path, key: CacheKey | None) -> tuple[CacheEntry | None, str]:
        mpath = folder / MANIFEST_NAME
        if not mpath.is_file():
            return None, "no manifest (interrupted build)"
        try:
            raw = json.loads(mpath.read_text())
            if raw.get("schema") != MANIFEST_SCHEMA:
                return None, f"manifest schema {raw.get('schema')!r}, this version reads {MANIFEST_SCHEMA}"
            manifest = Manifest(**raw)
        except (OSError, json.JSONDecodeError, TypeError) as exc:
            return None, f"unreadable manifest: {exc}"
        if key is not None and manifest.key != asdict(key):
            diff = sorted(k for k, v in asdict(key).items() if manifest.key.get(k) != v)
            return None, f"built for another configuration (differs in {', '.join(diff)})"
        entry = CacheEntry(folder, manifest)
        art = entry.artifact_path
        if not art.is_file():
            return None, f"engine file {manifest.artifact} is missing"
        size = art.stat().st_size
        if size != manifest.artifact_size:
            return None, f"engine file is {size} bytes, the manifest says {manifest.artifact_size} (truncated?)"
        if sha256_file(art) != manifest.artifact_sha256:
            return None, "engine file sha256 does not match the manifest (corrupt)"
        return entry, ""

    def commit(self, key: CacheKey, model_name: str, artifact_tmp: Path, artifact_name: str,
               **manifest_fields) -> CacheEntry:
        """Move a built artifact into its entry and write the manifest (last, atomically).

        Args:
            key: the entry's key.
            model_name: source model stem.
            artifact_tmp: the built file (moved).
            artifact_name: its name inside the entry (``engine.plan``, ``model.onnx``).
            **manifest_fields: the other :class:`Manifest` fields (build_time_s, status...).
        """
        folder = self.folder_for(key, model_name)
        if folder.exists():
            self.remove(folder)
        folder.mkdir(parents=True, exist_ok=True)
        art = folder / artifact_name
        shutil.move(str(artifact_tmp), art)
        manifest = Manifest(key=asdict(key), model_name=model_name, artifact=artifact_name,
                            artifact_sha256=sha256_file(art), artifact_size=art.stat().st_size,
                            **manifest_fields)
        self.write_manifest(folder, manifest)
        return CacheEntry(folder, manifest)

    @staticmethod
    def write_manifest(folder: Path, manifest: Manifest) -> None:
        """Write ``manifest.json`` atomically (temp file, then rename)."""
        tmp = folder / (MANIFEST_NAME + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(manifest), indent=2, sort_keys=True))
        tmp.replace(folder / MANIFEST_NAME)

    def remove(self, folder: Path) -> None:
        """Delete one entry folder (only folders inside this cache)."""
        folder = Path(folder)
        if folder.parent.resolve() != self.engines_dir.resolve():
            raise ValueError(f"{folder} is not an engine cache entry of {self.engines_dir}")
        shutil.rmtree(folder, ignore_errors=True)

    def entries(self) -> list[tuple[Path, CacheEntry | None, str]]:
        """Every entry folder with its checked entry, or None and the problem."""
        if not self.engines_dir.is_dir():
            return []
        out = []
        for folder in sorted(p for p in self.engines_dir.iterdir() if p.is_dir()):
            entry, problem = self._check(folder, None)
            out.append((folder, entry, problem))
        return out

    def clear(self, model_name: str | None = None,
              where: Callable[[CacheEntry | None], bool] | None = None) -> tuple[int, int]:
        """Remove all entries, or those of one model, or those ``where`` picks.

        Args:
            model_name: only entries of this model (None: every model).
            where: only entries for which ``where(entry)`` is true (``entry`` is
                None for an unusable folder).

        Returns:
            ``(entries removed, bytes freed)``.
        """
        n = freed = 0
        for folder, entry, _ in self.entries():
            name = entry.manifest.model_name if entry else folder.name
            if model_name is not None and name != model_name and not folder.name.startswith(model_name + "-"):
                continue
            if where is not None and not where(entry):
                continue
            freed += sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
            self.remove(folder)
            n += 1
        return n, freed

    # -- remembered build failures --------------------------------------------------
    @property
    def failures_dir(self) -> Path:
        """Folder of the remembered build failures."""
        return self.root / "failures"

    def _failure_path(self, key: CacheKey, model_name: str) -> Path:
        return self.failures_dir / (self.folder_for(key, model_name).name + ".json")

    def record_failure(self, key: CacheKey, model_name: str, reason: str, error: str = "") -> BuildFailure:
        """Remember that building ``key`` failed (written atomically; replaces an older record)."""
        failure = BuildFailure(key=asdict(key), model_name=model_name, reason=reason, error=error)
        path = self._failure_path(key, model_name)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(failure), indent=2, sort_keys=True))
        tmp.replace(path)
        return failure

    def failure(self, key: CacheKey, model_name: str) -> BuildFailure | None:
        """The remembered failure of ``key``, or None (an unreadable record counts as none)."""
        path = self._failure_path(key, model_name)
        if not path.is_file():
            return None
        failure = self._read_failure(path)
        return failure if failure is not None and failure.key == asdict(key) else None

    def forget_failure(self, key: CacheKey, model_name: str) -> bool:
        """Forget the failure of ``key`` (the next build tries again); True when one was remembered."""
        path = self._failure_path(key, model_name)
        existed = path.is_file()
        path.unlink(missing_ok=True)
        return existed

    def failures(self) -> list[BuildFailure]:
        """Every remembered failure, oldest first."""
        if not self.failures_dir.is_dir():
            return []
        found = (self._read_failure(p) for p in self.failures_dir.glob("*.json"))
        return sorted((f for f in found if f is not None), key=lambda f: f.when)

    @staticmethod
    def _read_failure(path: Path) -> BuildFailure | None:
        try:
            return BuildFailure(**json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError, TypeError) as exc:
            logger.debug("unreadable build failure record %s: %s", path, exc)
            return None

    def clear_failures(self, model_name: str | None = None) -> int:
        """Forget the remembered failures (of one model); returns how many."""
        n = 0
        for path in (self.failures_dir.glob("*.json") if self.failures_dir.is_dir() else ()):
            failure = self._read_failure(path)
            if model_name is None or failure is None or failure.model_name == model_name:
                path.unlink(missing_ok=True)
                n += 1
        return n

    def scratch_dir(self) -> Path:
        """A folder for in-progress builds inside the cache (same filesystem as entries)."""
        d = self.root / "tmp"
        d.mkdir(parents=True, exist_ok=True)
        return d
