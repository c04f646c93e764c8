"""Peers benchmark: avatar_app's per-frame processing beside OpenSeeFace and MediaPipe, interleaved.

Run by hand (never as a test):

    python benchmarks/peers.py [--rounds 1] [--out benchmarks/results/peers.json]

One process, one clip, the three trackers interleaved frame by frame (the order
rotates every frame), so machine load hits all three alike and the ratios
taken within the run stay meaningful on a shared machine:

- ``openseeface``: OpenSeeFace's ``Tracker`` (landmark model 0, one thread,
  one face, its ``facetracker.py`` defaults otherwise) imported at run time from
  ``../shared/peers/openseeface`` with its own models; its figure is
  ``Tracker.predict`` per detected face, as facetracker.py prints it
  ("Average tracking time per detected face");
- ``mediapipe``: MediaPipe's face mesh alone, as its documentation uses it on
  BGR camera frames: ``cv2.cvtColor(BGR2RGB)`` + ``FaceMesh(max_num_faces=1,
  refine_landmarks=True).process``;
- ``avatar_app``: the project's per-frame processing (``FrameProcessor``:
  track + reconstruct + speech + fuse, offline, no render) with the default
  reconstructor and speech animator, per stage from the frame's stamps, in the
  product's default order, "auto": the processor measures its frames in both
  orders (speech overlapping tracking, or after it) and keeps the faster
  (``processor.OrderChooser``); ``--order overlapped|sequential`` forces one.
  Overlapped, speech runs inside the track stage while MediaPipe's threads
  compute, so the stages' sum exceeds the frame's wall time. Which order each
  frame ran in is reported (``speech_order``: frames and wall time per order,
  the chooser's switches and probes);
- with ``--other-order`` (``--sequential``): the same with each order forced too,
  ``avatar_app_overlapped`` and ``avatar_app_sequential``, the A/B of the
  overlap in the same run;
- ``mediapipe_2faces_to_numpy`` (unless ``--no-baseline``): what the track stage
  ran before (legacy FaceMesh for two faces, landmarks copied into numpy);
- with ``--legacy-tail``, ``avatar_app_legacy_tail``: avatar_app as it ran before the
  p95 work of issue 18 (the periodic face detector every 1 s, before the landmark
  graph; the order chooser's probes 10 frames each 6 s / 150 frames), the A/B of
  that work in the same run (:func:`make_legacy_tail`);
- with ``--tail`` (benchmark-only instrumentation), per avatar_app system a ``tail``
  section: the frames at or above its p95 against those between p40 and p60, with
  their mean stage times (tune too), the share run sequentially (the order
  chooser's probes) and per-frame events (face-detector runs, Python GC passes and
  their time, calibration samples kept), and the tail's frames by cause
  (:func:`tail_report`). The counters wrap a few calls (~1 us a frame).

The clip: the three GRID clips of ../shared/testdata/video, three times over
(27 s, 675 frames at 25 fps), scaled to 640x512 and written with PyAV into a
temporary file (never kept). Each call is timed in wall time and in process CPU
time (all threads of this process; less sensitive to other processes' load).
The first ``--warmup`` frames of every round are left out of the statistics.

Bars (issue 18): avatar_app p95 <= 6 ms; avatar_app p50 <= 0.5 x OpenSeeFace's
average; track stage p50 <= 1.15 x MediaPipe's p50. The lead measures the final
figures on a quiet machine; ``load_average`` in the JSON says how busy it was.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GRID_CLIPS = ("grid_s1_bbaf2n.mp4", "grid_s2_swwp2s.mp4", "grid_lbax4n.mp4")
SIZE = (640, 512)
FPS = 25
STAGES = ("track", "reconstruct", "speech", "fuse")
#: ``--tail``: the stages and events reported per frame of the p95 tail against the median frames.
TAIL_STAGES = STAGES + ("tune",)
# ../shared beside the checkout (a worktree under wt/ has it one level further up)
SHARED = next((p / "shared" for p in ROOT.parents if (p / "shared").is_dir()), ROOT.parent / "shared")


def frame_processor_class():
    """The project's FrameProcessor (the one import to repoint when it moves)."""
    from avatar_app.pipeline import FrameProcessor

    return FrameProcessor


# -- the clip ---------------------------------------------------------------------
def make_clip(testdata: Path, out: Path, repeats: int = 3) -> Path:
    """Concatenate the GRID clips ``repeats`` times, scaled to 640x512, H.264 + AAC, with PyAV."""
    import av

    with av.open(str(out), "w") as oc:
        vs = oc.add_stream("libx264", rate=FPS, options={"crf": "16", "preset": "veryfast"})
        vs.width, vs.height, vs.pix_fmt = SIZE[0], SIZE[1], "yuv420p"
        as_ = oc.add_stream("aac", rate=44100, layout="mono")
        resampler = av.AudioResampler(format="fltp", layout="mono", rate=44100)
        k_video = 0
        n_audio = 0
        for _ in range(repeats):
            for name in GRID_CLIPS:
                with av.open(str(testdata / "video" / name)) as ic:
                    for fr in ic.decode(video=0):
                        img = fr.reformat(width=SIZE[0], height=SIZE[1], format="yuv420p")
                        img.pts, img.time_base = k_video, Fraction(1, FPS)
                        k_video += 1
                        oc.mux(vs.encode(img))
                    # each clip's audio, cut or padded to its video length, so sound and picture stay aligned
                    want = round(k_video / FPS * 44100)
                    ic.seek(0)
                    chunks = []
                    for af in ic.decode(audio=0):
                        for r in resampler.resample(af):
                            chunks.append(r.to_ndarray().reshape(-1))
                    pcm = np.concatenate(chunks).astype(np.float32)[: want - n_audio]
                    pcm = np.pad(pcm, (0, want - n_audio - len(pcm)))
                    for s in range(0, len(pcm), 1024):
                        block = pcm[s: s + 1024][None]
                        af = av.AudioFrame.from_ndarray(np.ascontiguousarray(block), format="fltp", layout="mono")
                        af.sample_rate, af.pts, af.time_base = 44100, n_audio + s, Fraction(1, 44100)
                        oc.mux(as_.encode(af))
                    n_audio = want
        oc.mux(vs.encode(None))
        oc.mux(as_.encode(None))
    return out


# -- the three systems --------------------------------------------------------------
class _Timed:
    """Wall and process-CPU time of each call, in ms."""

    def __init__(self, name: str):
        self.name = name
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def time(self, fn, *args):
        c0, t0 = time.process_time_ns(), time.perf_counter_ns()
        out = fn(*args)
        t1, c1 = time.perf_counter_ns(), time.process_time_ns()
        self.wall.append((t1 - t0) / 1e6)
        self.cpu.append((c1 - c0) / 1e6)
        return out


class OpenSeeFace(_Timed):
    """OpenSeeFace's Tracker, model 0, as ``facetracker.py --model 0 -m 1`` builds it."""

    def __init__(self, root: Path, width: int, height: int):
        super().__init__("openseeface")
        root = root.resolve()
        if str(root) not in sys.path:
            sys.path.insert(0, str(root))
        os.environ.setdefault("OMP_NUM_THREADS", "1")  # what facetracker.py sets for -m 1
        from tracker import Tracker  # OpenSeeFace's tracker.py, from the peer folder

        self.tracker = Tracker(width, height, model_type=0, max_threads=1, max_faces=1, discard_after=10,
                               scan_every=3, silent=True, model_dir=str(root / "models"), no_gaze=False,
                               detection_threshold=0.6, threshold=None, use_retinaface=0,
                               max_feature_updates=900, static_model=True, try_hard=False)
        self.faces: list[int] = []
        self.commit = (root / "COMMIT").read_text().strip() if (root / "COMMIT").exists() else None

    def step(self, frame) -> None:
        faces = self.time(self.tracker.predict, frame.image)
        self.faces.append(len(faces))


class MediaPipeAlone(_Timed):
    """MediaPipe's face mesh on its own: BGR->RGB and ``FaceMesh.process``.

    ``max_faces=2`` with ``points=True`` is what avatar_app's track stage ran before it
    drove MediaPipe's subgraphs itself (legacy FaceMesh looking for two faces, so its detector
    ran on every frame, and the landmarks copied into numpy one by one): the baseline.
    """

    def __init__(self, max_faces: int = 1, points: bool = False):
        super().__init__("mediapipe" if max_faces == 1 and not points else f"mediapipe_{max_faces}faces_to_numpy")
        import cv2
        import mediapipe as mp

        self._cv2 = cv2
        self._points = points
        self.mesh = mp.solutions.face_mesh.FaceMesh(
            static_image_mode=False, max_num_faces=max_faces, refine_landmarks=True,
            min_detection_confidence=0.5, min_tracking_confidence=0.5)
        self.faces: list[int] = []

    def _run(self, bgr):
        res = self.mesh.process(self._cv2.cvtColor(bgr, self._cv2.COLOR_BGR2RGB))
        if self._points:
            for f in res.multi_face_landmarks or []:
                np.array([(p.x, p.y, p.z) for p in f.landmark], dtype=np.float32)
        return res

    def step(self, frame) -> None:
        res = self.time(self._run, frame.image)
        self.faces.append(len(res.multi_face_landmarks or []))


class AvatarApp(_Timed):
    """The project's FrameProcessor with its default reconstructor and speech animator."""

    def __init__(self, speech_samples: np.ndarray, speech_offset_s: float, order: str = "auto",
                 name: str = "avatar_app"):
        super().__init__(name)
        self.order = order
        from avatar_app.pipeline import SPEECH_RATE, StageChoice, audio_window, build_stages

        self._audio_window = audio_window
        self._rate = SPEECH_RATE
        # the stages `avatar-app render` builds (the one stage factory), the MediaPipe tracker
        self.built = build_stages(StageChoice(live=False, audio=True, tracker="mediapipe"))
        self.tracker, self.reconstructor, self.speech = self.built.tracker, self.built.reconstructor, self.built.speech
        self.proc = frame_processor_class()(self.tracker, self.reconstructor, self.speech, live=False,
                                            chain=self.built.chain)
        self.proc.speech_lookahead_s = float(getattr(self.speech, "offline_lookahead_s", 0.0) or 0.0)
        self.proc.speech_order = order
        self.context_s = float(getattr(self.speech, "context_s", 0.1))
        self.samples, self.offset = speech_samples, speech_offset_s
        self.stages: dict[str, list[float]] = {s: [] for s in STAGES}
        self.faces: list[int] = []
        self.overlapped: list[bool | None] = []  # the order each frame ran in
        self.events: dict[str, list[int]] | None = None  # ``--tail``: per-frame event counts

    def watch_events(self, probes: "_EventProbes") -> None:
        """Count, per frame, the detector runs, GC passes and calibration samples (``--tail``)."""
        self.probes = probes
        probes.wrap_detector(self.tracker)
        self.events = {k: [] for k in _EventProbes.KEYS}
        self.stages.setdefault("tune", [])

    def describe(self) -> dict:
        d = {}
        for key, obj in (("reconstructor", self.reconstructor), ("speech", self.speech)):
            d[key] = obj.describe() if hasattr(obj, "describe") else type(obj).__name__
        return d

    def step(self, frame) -> None:
        f = frame  # frozen: the processor fills a new stage-timing record per call
        window = self._audio_window(self.samples, self._rate,
                                    f.media_time_s - self.offset + self.proc.speech_lookahead_s, self.context_s)
        if self.events is not None:
            before = self.probes.snapshot(self.tracker)
        state = self.time(self.proc.process, f, window)
        for s in self.stages:
            a, b = state.stamps.get(s, (0, 0))
            self.stages[s].append((b - a) / 1e6)
        if self.events is not None:
            after = self.probes.snapshot(self.tracker)
            for k, v in self.events.items():
                v.append(after[k] - before[k])
        self.faces.append(int(state.face_found))
        self.overlapped.append(self.proc.last_overlapped)

    def order_report(self, keep: np.ndarray) -> dict:
        """Which order(s) ran: frames and wall time per order, and the chooser's record."""
        ran = np.asarray([o is True for o in self.overlapped])
        out = {"mode": self.order, "frames": {}, "wall_ms": {}}
        for label, mask in (("overlapped", ran), ("sequential", ~ran)):
            out["frames"][label] = int((mask & keep).sum())
            out["wall_ms"][label] = _summary(self.wall, mask & keep)
        if self.order == "auto":
            out["chooser"] = self.proc.order_chooser.describe()
        return out


def make_legacy_tail(app: "AvatarApp") -> None:
    """Give ``app`` the settings of before the p95 work (``--legacy-tail``): the tracker's periodic
    detector every 1 s of media time, run before the landmark graph on the calling thread, and the
    order chooser's former probes (10 frames each 6 s and 150 frames). Call again after a new
    processor is made (each round)."""
    from avatar_app.pipeline.processor import OrderChooser, speech_overlap_default

    app.proc.order_chooser = OrderChooser(speech_overlap_default(), probe_frames=10, interval_s=6.0,
                                          interval_frames=150)
    t = app.tracker
    t._redetect_s = 1.0
    if "_start_detection" not in vars(t):  # once: _EventProbes may wrap it afterwards
        def before(frame, w, h, t_s):
            found = t._find_faces(frame, w, h, t_s, near=True, far=False)
            return lambda: found

        t._start_detection = before


class _EventProbes:
    """Benchmark-only counters of what a frame did besides its median work (``--tail``).

    ``detector``: face-detector runs (the tracker's ``_detect_faces`` and ``_start_detection``
    wrapped on the instance; a fallback ``_start_detection`` that detects at once counts
    twice); ``gc0``/``gc1``/``gc2``: Python GC passes per generation and ``gc_us`` their
    time (``gc.callbacks``); ``calib``: calibration samples kept (``SampleSchedule.admit``
    returning a slot, wrapped on the class).
    """

    KEYS = ("detector", "gc0", "gc1", "gc2", "gc_us", "calib")

    def __init__(self):
        from avatar_app.reconstruction import calibration

        self.counts = dict.fromkeys(self.KEYS, 0)
        self._gc_t0 = 0
        gc.callbacks.append(self._gc)
        admit = calibration.SampleSchedule.admit
        counts = self.counts

        def counted_admit(sched, t_s):
            slot = admit(sched, t_s)
            if slot is not None:
                counts["calib"] += 1
            return slot

        calibration.SampleSchedule.admit = counted_admit

    def _gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_t0 = time.perf_counter_ns()
        else:
            self.counts[f"gc{info['generation']}"] += 1
            self.counts["gc_us"] += (time.perf_counter_ns() - self._gc_t0) // 1000

    def wrap_detector(self, tracker) -> None:
        counts = self.counts
        for name in ("_detect_faces", "_start_detection"):  # the periodic run starts through the second
            real = getattr(tracker, name, None)
            if real is None:
                continue

            def counted(*a, _real=real, **k):
                counts["detector"] += 1
                return _real(*a, **k)

            setattr(tracker, name, counted)

    def snapshot(self, tracker) -> dict:
        return dict(self.counts)


def tail_report(app: "AvatarApp", keep: np.ndarray) -> dict:
    """What the frames at or above the p95 wall time did, against the frames between p40 and p60.

    Per group: frames, mean wall ms, mean ms per stage, "rest" (wall minus the stages that do
    not overlap: track, reconstruct, fuse, tune, and speech when it ran after tracking), the
    share of frames run sequentially (speech after tracking: the order chooser's probes), and
    per event the share of frames with it and its mean count; ``excess_ms``: tail minus median
    group per stage.
    """
    wall = np.asarray(app.wall)
    p40, p60, p95 = np.percentile(wall[keep], [40, 60, 95])
    groups = {"tail_p95": keep & (wall >= p95), "median_p40_p60": keep & (wall >= p40) & (wall <= p60)}
    seq = np.asarray([o is False for o in app.overlapped])
    stages = {k: np.asarray(v) for k, v in app.stages.items()}
    serial = sum(stages[k] for k in ("track", "reconstruct", "fuse", "tune")) + np.where(seq, stages["speech"], 0)
    rest = wall - serial
    out: dict = {}
    for name, m in groups.items():
        g = {"frames": int(m.sum()), "wall_ms": round(float(wall[m].mean()), 3),
             "stages_ms": {k: round(float(v[m].mean()), 3) for k, v in stages.items()},
             "rest_ms": round(float(rest[m].mean()), 3), "sequential_share": round(float(seq[m].mean()), 3),
             "events": {}}
        for k, v in (app.events or {}).items():
            v = np.asarray(v)[m]
            g["events"][k] = {"share": round(float((v > 0).mean()), 3), "mean": round(float(v.mean()), 3)}
        out[name] = g
    t, md = out["tail_p95"], out["median_p40_p60"]
    out["excess_ms"] = {k: round(t["stages_ms"][k] - md["stages_ms"][k], 3) for k in t["stages_ms"]}
    out["excess_ms"]["rest"] = round(t["rest_ms"] - md["rest_ms"], 3)
    # the tail's frames split by what they did: each class's frames and mean wall time
    ev = {k: np.asarray(v) for k, v in (app.events or {}).items()}
    det = ev.get("detector", np.zeros_like(wall)) > 0
    gcs = (ev.get("gc0", 0) + ev.get("gc1", 0) + ev.get("gc2", 0)) > 0 if ev else np.zeros(wall.shape, bool)
    classes = {"sequential": seq, "detector": det & ~seq, "gc": gcs & ~seq & ~det}
    classes["none_of_these"] = ~(seq | det | gcs)
    tail = groups["tail_p95"]
    out["tail_by_cause"] = {k: {"frames": int((tail & c).sum()),
                                "of_all_kept_frames_with_it": int((keep & c).sum()),
                                "wall_ms_when_present": (round(float(wall[keep & c].mean()), 3)
                                                         if (keep & c).any() else None)}
                            for k, c in classes.items()}
    return out


# -- statistics ---------------------------------------------------------------------
def _summary(values: list[float], keep: np.ndarray) -> dict:
    v = np.asarray(values, np.float64)[keep]
    if v.size == 0:
        return {"n": 0}
    return {"n": int(v.size), "mean": round(float(v.mean()), 3), "p50": round(float(np.percentile(v, 50)), 3),
            "p95": round(float(np.percentile(v, 95)), 3), "max": round(float(v.max()), 3)}


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--testdata", type=Path, default=Path(os.environ.get("AVATAR_TESTDATA", SHARED / "testdata")))
    ap.add_argument("--openseeface", type=Path, default=SHARED / "peers" / "openseeface",
                    help="OpenSeeFace folder (tracker.py and models/); never copied")
    ap.add_argument("--no-openseeface", action="store_true", help="leave the peer out")
    ap.add_argument("--no-baseline", action="store_true",
                    help="leave out the old track stage's graph (FaceMesh for two faces, landmarks to numpy)")
    ap.add_argument("--order", choices=("auto", "overlapped", "sequential"), default="auto",
                    help="avatar_app's speech order (default auto: measured at run time, the faster kept)")
    ap.add_argument("--other-order", "--sequential", dest="sequential", action="store_true",
                    help="add avatar_app with each order forced too (avatar_app_overlapped, avatar_app_sequential)")
    ap.add_argument("--rounds", type=int, default=1, help="passes over the clip")
    ap.add_argument("--warmup", type=int, default=10, help="frames left out at the start of each round")
    ap.add_argument("--legacy-tail", action="store_true",
                    help="add avatar_app_legacy_tail: the settings of before the p95 work, A/B in the same run")
    ap.add_argument("--tail", action="store_true",
                    help="benchmark-only instrumentation: per-stage times and events (detector runs, GC passes, "
                         "calibration samples, order) of the p95 tail frames against the median ones, in 'tail'")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "peers.json")
    args = ap.parse_args()

    from avatar_app.capture.video_file import VideoFileSource
    from avatar_app.pipeline import SPEECH_RATE

    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        clip = make_clip(args.testdata, Path(tmp) / "grid_concat_640x512.mp4")
        with VideoFileSource(clip) as src:
            info = src.info
            audio = src.read_audio(SPEECH_RATE)
            frames = list(src.frames())
    print(f"clip: {len(frames)} frames {info.width}x{info.height} at {info.fps:g} fps, "
          f"{info.duration_s:.1f} s, audio {audio.samples.size / SPEECH_RATE:.1f} s", flush=True)

    systems: list = [MediaPipeAlone(), AvatarApp(audio.samples, float(audio.media_time_s), order=args.order)]
    if args.sequential:
        for order in ("overlapped", "sequential"):
            if order != args.order:
                systems.append(AvatarApp(audio.samples, float(audio.media_time_s), order=order,
                                         name=f"avatar_app_{order}"))
    if args.legacy_tail:
        legacy = AvatarApp(audio.samples, float(audio.media_time_s), order=args.order, name="avatar_app_legacy_tail")
        make_legacy_tail(legacy)
        systems.append(legacy)
    if not args.no_baseline:
        systems.append(MediaPipeAlone(max_faces=2, points=True))
    if not args.no_openseeface:
        systems.append(OpenSeeFace(args.openseeface, info.width, info.height))
    if args.tail:
        probes = _EventProbes()
        for s in systems:
            if isinstance(s, AvatarApp):
                s.watch_events(probes)
    keep = []
    t_run = time.perf_counter()
    for r in range(args.rounds):
        if r:
            for s in systems:  # a new round starts a new stream: fresh state, media time from 0
                if isinstance(s, AvatarApp):
                    s.tracker.reset()
                    s.reconstructor.reset()
                    s.speech.reset()
                    s.built.chain.reset()
                    s.proc = frame_processor_class()(s.tracker, s.reconstructor, s.speech, live=False,
                                                     chain=s.built.chain)
                    s.proc.speech_lookahead_s = float(getattr(s.speech, "offline_lookahead_s", 0.0) or 0.0)
                    s.proc.speech_order = s.order
                    if s.name == "avatar_app_legacy_tail":
                        make_legacy_tail(s)
        for i, frame in enumerate(frames):
            k = (i + r) % len(systems)
            for s in systems[k:] + systems[:k]:
                s.step(frame)
            keep.append(i >= args.warmup)
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    wall_run = time.perf_counter() - t_run
    keep = np.asarray(keep)

    results = {}
    for s in systems:
        res = {"wall_ms": _summary(s.wall, keep), "cpu_ms": _summary(s.cpu, keep),
               "frames_with_face": int(np.sum(np.asarray(s.faces)[keep] > 0)), "frames": int(keep.sum())}
        if isinstance(s, OpenSeeFace):
            faces = np.maximum(np.asarray(s.faces), 1)
            per_face = (np.asarray(s.wall) / faces)[keep & (np.asarray(s.faces) > 0)]
            res["average_per_detected_face_ms"] = round(float(per_face.mean()), 3) if per_face.size else None
            res["what"] = "Tracker.predict, model 0, 1 thread, 1 face; peer commit " + str(s.commit)
        if isinstance(s, AvatarApp):
            res["stages_wall_ms"] = {k: _summary(v, keep) for k, v in s.stages.items()}
            res["components"] = s.describe()
            res["speech_order"] = s.order_report(keep)
            if s.events is not None:
                res["tail"] = tail_report(s, keep)
        results[s.name] = res

    app, mp_ = results["avatar_app"], results["mediapipe"]
    track = app["stages_wall_ms"]["track"]
    osf = results.get("openseeface")
    osf_avg = osf["average_per_detected_face_ms"] if osf else None
    ratios = {
        "track_p50_over_mediapipe_p50": _ratio(track["p50"], mp_["wall_ms"]["p50"]),
        "track_mean_over_mediapipe_mean": _ratio(track["mean"], mp_["wall_ms"]["mean"]),
        "avatar_app_p50_over_openseeface_average": _ratio(app["wall_ms"]["p50"], osf_avg),
        "avatar_app_cpu_p50_over_openseeface_cpu_p50": (
            _ratio(app["cpu_ms"]["p50"], osf["cpu_ms"]["p50"]) if osf else None),
        "avatar_app_p50_over_mediapipe_p50": _ratio(app["wall_ms"]["p50"], mp_["wall_ms"]["p50"]),
    }
    for other_name in ("avatar_app_sequential", "avatar_app_overlapped"):
        other = results.get(other_name)
        if other:
            tail = other_name.removeprefix("avatar_app_")
            ratios[f"avatar_app_p50_over_{tail}_p50"] = _ratio(app["wall_ms"]["p50"], other["wall_ms"]["p50"])
            ratios[f"{other_name}_p50_over_openseeface_average"] = _ratio(other["wall_ms"]["p50"], osf_avg)
    legacy = results.get("avatar_app_legacy_tail")
    if legacy:
        ratios["avatar_app_p95_over_legacy_tail_p95"] = _ratio(app["wall_ms"]["p95"], legacy["wall_ms"]["p95"])
        ratios["legacy_tail_p95_over_mediapipe_p95"] = _ratio(legacy["wall_ms"]["p95"], mp_["wall_ms"]["p95"])
    ratios["avatar_app_p95_over_mediapipe_p95"] = _ratio(app["wall_ms"]["p95"], mp_["wall_ms"]["p95"])
    old = results.get("mediapipe_2faces_to_numpy")
    if old:
        ratios["old_track_graph_p50_over_mediapipe_p50"] = _ratio(old["wall_ms"]["p50"], mp_["wall_ms"]["p50"])
        ratios["track_p50_over_old_track_graph_p50"] = _ratio(track["p50"], old["wall_ms"]["p50"])
    bars = {
        "avatar_app_p95_le_6ms": app["wall_ms"]["p95"] <= 6.0,
        "avatar_app_p50_le_half_openseeface": (ratios["avatar_app_p50_over_openseeface_average"] or 9) <= 0.5,
        "track_le_1.15_mediapipe": (ratios["track_p50_over_mediapipe_p50"] or 9) <= 1.15,
    }
    doc = {
        "what": __doc__.split("\n\n")[2].strip().replace("\n", " ") if __doc__ else "",
        "clip": {"sources": list(GRID_CLIPS), "repeats": 3, "size": list(SIZE), "fps": FPS,
                 "frames": len(frames), "duration_s": round(info.duration_s, 2)},
        "rounds": args.rounds,
        "warmup_frames_left_out": args.warmup,
        "load_average_at_start": [round(v, 2) for v in load_start],
        "load_average_at_end": [round(v, 2) for v in os.getloadavg()],
        "run_wall_s": round(wall_run, 1),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "results": results,
        "ratios_same_run": ratios,
        "bars": bars,
    }
    for name, res in results.items():
        w = res["wall_ms"]
        print(f"{name:12s} wall p50 {w['p50']:6.2f}  p95 {w['p95']:6.2f}  mean {w['mean']:6.2f} ms   "
              f"cpu p50 {res['cpu_ms']['p50']:6.2f} ms   faces {res['frames_with_face']}/{res['frames']}")
    for k, v in app["stages_wall_ms"].items():
        print(f"  {k:12s} p50 {v['p50']:6.3f}  p95 {v['p95']:6.3f}  mean {v['mean']:6.3f} ms")
    for name, res in results.items():
        if "speech_order" in res:
            print(f"{name} order: {json.dumps(res['speech_order'])}")
        if "tail" in res:
            print(f"{name} tail: {json.dumps(res['tail'])}")
    print(json.dumps({"ratios": ratios, "bars": bars}, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
