"""Real-face fidelity evaluation: does the avatar do what the face does?

Label-free measurements on any real recording (the face's visible geometry from
MediaPipe's landmarks against the same geometry on the avatar), hand-made event
labels for the expressive clips, and the London neutral/smiling pairs. The
pipeline-level benchmark ``benchmarks/fidelity.py`` and the tests call this
package; a training script can call it to score a model.
"""
