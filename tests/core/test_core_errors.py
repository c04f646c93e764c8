"""The CLI's one error line (core.errors.error_line): lower case after "error: ", as its other lines."""
from __future__ import annotations

import pytest

from avatar_app.core.errors import InputError, NoFaceError, error_line


@pytest.mark.parametrize(("message", "line"), [
    ("Video file not found: 'x.mp4'", "error: video file not found: 'x.mp4'"),
    ("A transparent background needs alpha", "error: a transparent background needs alpha"),  # one-letter word
    ("No face was found in any of the 3 frames", "error: no face was found in any of the 3 frames"),
    ("MP4 index missing", "error: MP4 index missing"),  # capitals stay
    ("FFmpeg says: bad", "error: FFmpeg says: bad"),  # mixed case stays
    ("'/tmp/x.mp4' is not a readable video", "error: '/tmp/x.mp4' is not a readable video"),
    ("port 8001 on 127.0.0.1 is in use", "error: port 8001 on 127.0.0.1 is in use"),
    ("A", "error: A"),
    ("TensorRT is not installed", "error: TensorRT is not installed"),  # inner capitals stay
    ("MediaPipe found no face", "error: MediaPipe found no face"),
    ("VideoFileSource is closed", "error: VideoFileSource is closed"),  # a class name
    ("Triton Inference Server did not start", "error: Triton Inference Server did not start"),  # a name
    ("Cannot create '/x'", "error: cannot create '/x'"),
])
def test_first_letter_lower_case_unless_a_capitalised_word(message, line):
    assert error_line(InputError(message)) == line


def test_any_error_type():
    assert error_line(NoFaceError("No face")) == "error: no face"
