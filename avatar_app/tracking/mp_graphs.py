"""MediaPipe's face detector and face landmark model as two small graphs the tracker drives.

MediaPipe's legacy ``FaceMesh`` graph (``face_landmark_front_cpu``) decides by
itself when to run its face detector: on every frame where it tracks fewer
faces than ``max_num_faces``. Following one face among several needed
``max_num_faces=2``, so the detector ran on every frame with one face in view
(about 1.5x the cost of the landmark model alone). These graphs are built
from the same registered MediaPipe subgraphs, so the models, their pre- and
post-processing and the region-of-interest rules are MediaPipe's own, but
the detector is a separate graph that the tracker calls only when it wants
to:

- :func:`landmark_graph`: ``FaceLandmarkCpu`` (with attention: 478 points)
  on one region of interest (ROI, a rotated normalised rectangle), plus
  ``FaceLandmarkLandmarksToRoi``, MediaPipe's ROI for the next frame from the
  landmarks. Without a face in the ROI (face presence below the threshold) it
  returns no landmarks.
- :func:`detection_graph`: ``FaceDetectionShortRange`` (faces larger than
  about a fifth of the image) or ``FaceDetectionFullRange`` (down to ~30 px),
  plus ``FaceDetectionFrontDetectionToRoi``, MediaPipe's ROI for the landmark
  model from each detection.

With the same input ROI the landmarks equal those of ``FaceMesh`` bit for bit
(checked in tests/tracking/test_tracking_face_mesh.py).

:class:`Graph` runs a graph through MediaPipe's public ``CalculatorGraph``
API instead of ``SolutionBase.process``, which builds a new ``namedtuple``
class on every call (measured: a large share of a detector call's Python time
and most of the garbage that triggers the cyclic collector on every few frames).
"""
from __future__ import annotations

import os

import numpy as np

from avatar_app.core.landmarks import NUM_LANDMARKS
from avatar_app.tracking.native_log import native_stderr_to_log

_LANDMARK_GRAPH = """
input_stream: "IMAGE:image"
input_stream: "ROI:roi"
input_side_packet: "WITH_ATTENTION:with_attention"
output_stream: "LANDMARKS:landmarks"
output_stream: "ROI_NEXT:roi_next"
node { calculator: "ImagePropertiesCalculator" input_stream: "IMAGE:image" output_stream: "SIZE:image_size" }
node {
  calculator: "FaceLandmarkCpu"
  input_stream: "IMAGE:image" input_stream: "ROI:roi"
  input_side_packet: "WITH_ATTENTION:with_attention"
  output_stream: "LANDMARKS:landmarks"
}
node {
  calculator: "FaceLandmarkLandmarksToRoi"
  input_stream: "LANDMARKS:landmarks" input_stream: "IMAGE_SIZE:image_size"
  output_stream: "ROI:roi_next"
}
"""

_DETECTION_GRAPH = """
input_stream: "IMAGE:image"
output_stream: "DETECTIONS:detections"
output_stream: "ROIS:rois"
node { calculator: "%s" input_stream: "IMAGE:image" output_stream: "DETECTIONS:detections" }
node { calculator: "ImagePropertiesCalculator" input_stream: "IMAGE:image" output_stream: "SIZE:image_size" }
node {
  calculator: "BeginLoopDetectionCalculator"
  input_stream: "ITERABLE:detections" input_stream: "CLONE:image_size"
  output_stream: "ITEM:detection" output_stream: "CLONE:loop_image_size" output_stream: "BATCH_END:loop_end"
}
node {
  calculator: "FaceDetectionFrontDetectionToRoi"
  input_stream: "DETECTION:detection" input_stream: "IMAGE_SIZE:loop_image_size"
  output_stream: "ROI:roi"
}
node {
  calculator: "EndLoopNormalizedRectCalculator"
  input_stream: "ITEM:roi" input_stream: "BATCH_END:loop_end"
  output_stream: "ITERABLE:rois"
}
"""

# The node of FaceLandmarkCpu that gates the landmarks on the face presence score (the name
# MediaPipe's own FaceMesh sets ``min_tracking_confidence`` on).
_PRESENCE_NODE = "facelandmarkcpu__ThresholdingCalculator"

# One landmark of a NormalizedLandmarkList on the wire, when only x, y, z are set: tag 0x0a
# (field 1, length-delimited), length 15, then 0x0d x, 0x15 y, 0x1d z (fields 1-3, fixed32).
_LANDMARK_WIRE = np.dtype([("tag", "u1"), ("len", "u1"), ("tx", "u1"), ("x", "<f4"),
                           ("ty", "u1"), ("y", "<f4"), ("tz", "u1"), ("z", "<f4")])
_WIRE_TAGS = {"tag": 0x0A, "len": 15, "tx": 0x0D, "ty": 0x15, "tz": 0x1D}


def _mediapipe_root() -> str:
    import mediapipe

    return os.path.dirname(os.path.dirname(os.path.abspath(mediapipe.__file__)))


class Graph:
    """A running MediaPipe calculator graph fed one set of packets at a time.

    Args:
        config: the graph as a ``CalculatorGraphConfig`` text proto.
        outputs: output stream names to collect.
        side_packets: input side packets by name (MediaPipe packets).
        node_options: ``{node index: options message}`` packed into those nodes of
            ``config`` (how a subgraph such as the face detector takes its options).
        options: ``{node name: (extension, field, value)}`` set on nodes of the
            expanded graph (subgraph nodes are named ``subgraph__Calculator``).
        warmup: packets of one run made while starting (a blank image finds no
            face, so it leaves nothing behind): the calculators open their
            models on the first packets and print their native log lines then.
        quiet_runs: how many first :meth:`run` calls keep MediaPipe's native
            log lines off stderr (they go to the Python log at DEBUG).

    Raises:
        RuntimeError: MediaPipe cannot build or start the graph.
        KeyError: a node named in ``options`` is not in the graph.

    Thread: not thread-safe; one caller at a time.
    """

    def __init__(self, config: str, outputs: tuple[str, ...], side_packets: dict | None = None,
                 node_options: dict | None = None, options: dict | None = None, warmup: dict | None = None,
                 quiet_runs: int = 2):
        from google.protobuf import text_format
        from mediapipe.framework import calculator_pb2
        from mediapipe.python import (
            CalculatorGraph,
            ValidatedGraphConfig,
            resource_util,
        )

        resource_util.set_resource_dir(_mediapipe_root())  # the subgraphs find their .tflite files there
        graph = text_format.Parse(config, calculator_pb2.CalculatorGraphConfig())
        for index, message in (node_options or {}).items():
            graph.node[index].node_options.add().Pack(message)
        validated = ValidatedGraphConfig()
        validated.initialize(graph_config=graph)
        expanded = calculator_pb2.CalculatorGraphConfig()
        expanded.ParseFromString(validated.binary_config)
        for name, (ext, field, value) in (options or {}).items():
            nodes = [n for n in expanded.node if n.name == name]
            if not nodes:
                raise KeyError(f"no node {name!r} in the MediaPipe graph")
            setattr(nodes[0].options.Extensions[ext], field, value)
        self._outputs: dict[str, object] = {}
        with native_stderr_to_log():
            self._graph = CalculatorGraph(graph_config=expanded)
            for name in outputs:
                self._graph.observe_output_stream(name, self._collect, True)
            self._graph.start_run(side_packets or {})
            self._ts = 0
            if warmup:
                self._feed(warmup, 1)
                self._ts = 1
        self._quiet_left = int(quiet_runs)

    def _collect(self, stream: str, packet) -> None:
        if not packet.is_empty():
            self._outputs[stream] = packet

    def run(self, inputs: dict, meanwhile=None) -> dict:
        """Feed one packet per input stream (at the next timestamp) and wait for the outputs.

        Args:
            inputs: ``{input stream name: packet}``.
            meanwhile: a callable (no arguments, must not raise) called on this thread
                after the packets went in, while MediaPipe's threads compute, before
                the wait (other work overlaps the graph without a second Python thread;
                during the first ``quiet_runs`` runs it is called after the wait).

        Returns:
            ``{output stream name: packet}`` for the outputs that produced a packet.

        Raises:
            RuntimeError: the graph failed (MediaPipe's error).
        """
        self._outputs = {}
        self._ts += 1
        ts = self._ts
        if self._quiet_left > 0:
            self._quiet_left -= 1
            with native_stderr_to_log():
                self._feed(inputs, ts)
            if meanwhile is not None:  # after: its own output is not MediaPipe's start-up log
                meanwhile()
        else:
            self._feed(inputs, ts, meanwhile)
        return self._outputs

    def start(self, inputs: dict):
        """Feed one packet per input stream (at the next timestamp) without waiting for the outputs.

        The graph computes on MediaPipe's threads while the caller does other work, e.g. another
        graph's :meth:`run` (the periodic face detector beside the landmark model). No other
        :meth:`run` or :meth:`start` of this graph until the returned callable was called.

        Args:
            inputs: ``{input stream name: packet}``.

        Returns:
            A callable (no arguments) that waits for the graph and returns what :meth:`run` would
            have: ``{output stream name: packet}``. During the first ``quiet_runs`` runs the graph
            is run (and waited for) at once, its native log kept off stderr.

        Raises:
            RuntimeError: the graph failed (MediaPipe's error; raised by the callable when the
                graph fails while computing).
        """
        if self._quiet_left > 0:
            out = self.run(inputs)
            return lambda: out
        self._outputs = {}
        self._ts += 1
        ts = self._ts
        for name, packet in inputs.items():
            self._graph.add_packet_to_input_stream(stream=name, packet=packet.at(ts))

        def wait() -> dict:
            self._graph.wait_until_idle()
            return self._outputs

        return wait

    def _feed(self, inputs: dict, ts, meanwhile=None) -> None:
        for name, packet in inputs.items():
            self._graph.add_packet_to_input_stream(stream=name, packet=packet.at(ts))
        if meanwhile is not None:
            meanwhile()
        self._graph.wait_until_idle()

    def close(self) -> None:
        """Stop the graph. Idempotent."""
        if self._graph is not None:
            try:
                self._graph.close()
            finally:
                self._graph = None


def landmark_graph(min_tracking_confidence: float) -> Graph:
    """The face landmark model (478 points, with attention) on one ROI.

    Inputs ``image`` (an :func:`image_packet`) and ``roi`` (a NormalizedRect
    packet); outputs ``landmarks`` (NormalizedLandmarkList) and ``roi_next``
    (NormalizedRect, MediaPipe's ROI for the next frame), both absent when the
    face presence score is below ``min_tracking_confidence``.
    """
    from mediapipe.calculators.util import thresholding_calculator_pb2
    from mediapipe.python import packet_creator

    from mediapipe.framework.formats import rect_pb2

    ext = thresholding_calculator_pb2.ThresholdingCalculatorOptions.ext
    whole = rect_pb2.NormalizedRect(x_center=0.5, y_center=0.5, width=1.0, height=1.0)
    return Graph(_LANDMARK_GRAPH, ("landmarks", "roi_next"),
                 side_packets={"with_attention": packet_creator.create_bool(True)},
                 options={_PRESENCE_NODE: (ext, "threshold", float(min_tracking_confidence))},
                 warmup={"image": _blank(), "roi": rect_packet(whole)})


def detection_graph(full_range: bool, min_detection_confidence: float) -> Graph:
    """MediaPipe's face detector with the landmark model's ROI of each face.

    Input ``image``; outputs ``detections`` (list of Detection) and ``rois``
    (list of NormalizedRect, same order), absent when no face is found.

    Args:
        full_range: the full-range model (faces down to ~30 px, slower) instead
            of the short-range one.
        min_detection_confidence: detector score threshold in [0, 1].
    """
    from mediapipe.modules.face_detection import face_detection_pb2

    opts = face_detection_pb2.FaceDetectionOptions(min_score_thresh=float(min_detection_confidence))
    opts.delegate.xnnpack.SetInParent()  # as MediaPipe's own face detection graphs
    return Graph(_DETECTION_GRAPH % ("FaceDetectionFullRange" if full_range else "FaceDetectionShortRange"),
                 ("detections", "rois"), node_options={0: opts}, warmup={"image": _blank()})


def _blank():
    return image_packet(np.zeros((64, 64, 3), np.uint8))


def image_packet(rgb: np.ndarray):
    """An ImageFrame packet (SRGB) of a (H, W, 3) uint8 RGB image.

    The array is shared, not copied: it is made read-only here, so the caller
    must hand over an array it no longer writes to (e.g. fresh from cvtColor).
    """
    from mediapipe.python import ImageFormat, packet_creator

    rgb.flags.writeable = False
    return packet_creator.create_image_frame(data=rgb, image_format=ImageFormat.SRGB, copy=False)


def rect_packet(rect):
    """A NormalizedRect packet of a NormalizedRect message."""
    from mediapipe.python import packet_creator

    return packet_creator.create_proto(rect)


def landmarks_array(packet) -> np.ndarray:
    """(478, 3) float32 ``x, y, z`` of a NormalizedLandmarkList packet.

    Reads the serialised message with numpy when each landmark holds exactly
    x, y, z (what the face landmark model outputs), else field by field.

    Raises:
        ValueError: the list does not hold 478 landmarks.
    """
    from mediapipe.python import packet_getter

    msg = packet_getter.get_proto(packet)
    buf = msg.SerializeToString()
    if len(buf) == NUM_LANDMARKS * _LANDMARK_WIRE.itemsize:
        rec = np.frombuffer(buf, _LANDMARK_WIRE)
        if all((rec[k] == v).all() for k, v in _WIRE_TAGS.items()):
            out = np.empty((NUM_LANDMARKS, 3), np.float32)
            out[:, 0], out[:, 1], out[:, 2] = rec["x"], rec["y"], rec["z"]
            return out
    out = np.array([(p.x, p.y, p.z) for p in msg.landmark], dtype=np.float32).reshape(-1, 3)
    if out.shape != (NUM_LANDMARKS, 3):
        raise ValueError(f"expected {NUM_LANDMARKS} landmarks, got {len(out)}")
    return out


def detections(outputs: dict) -> tuple[list[np.ndarray], list[object]]:
    """Boxes and ROIs of a :func:`detection_graph` run.

    Args:
        outputs: what :meth:`Graph.run` returned for one image.

    Returns:
        ``(boxes, rois)``: (4,) float64 ``x0, y0, x1, y1`` boxes in normalised
        image coordinates and the matching NormalizedRect messages.
    """
    from mediapipe.python import packet_getter

    if "detections" not in outputs or "rois" not in outputs:
        return [], []
    dets = packet_getter.get_proto_list(outputs["detections"])
    rois = packet_getter.get_proto_list(outputs["rois"])
    boxes = []
    for d in dets:
        b = d.location_data.relative_bounding_box
        boxes.append(np.array([b.xmin, b.ymin, b.xmin + b.width, b.ymin + b.height], np.float64))
    return boxes, list(rois)
