"""Weights-file suffixes, shared with the configuration."""

from __future__ import annotations

# -- constants shared with the configuration (the bottom layer imports only this) ------

# Weights files by suffix: verified formats, and formats ``verify`` reports "not
# verified" (so a ship gate fails closed on them); ``*.index.json`` names shards.
WEIGHT_SUFFIXES = frozenset(
    {".safetensors", ".pt", ".pth", ".bin", ".ckpt", ".tar", ".npy", ".npz", ".gguf"}
)
UNVERIFIABLE_SUFFIXES = frozenset(
    {
        ".onnx",
        ".h5",
        ".hdf5",
        ".keras",
        ".msgpack",
        ".tflite",
        ".pb",
        ".pkl",
        ".pickle",
        ".joblib",
        ".ggml",
        ".mlmodel",
        ".engine",
        ".plan",
        ".params",
        ".pdparams",
        ".ot",
        ".nemo",
        ".mar",
        ".llamafile",
        ".tensors",
        ".pte",
    }
)
INDEX_SUFFIX = ".index.json"
