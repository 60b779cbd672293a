"""The kinds' names and where their classes live (no imports: the options read the names)."""

KINDS = {
    "structured": ("prm.kinds.structured", "StructuredKind"),
    "tfidf": ("prm.kinds.tfidf", "TfidfKind"),
    "neural": ("prm.kinds.neural", "NeuralKind"),
    "frozen": ("prm.kinds.neural", "FrozenKind"),
}
"""Each kind's name and the module and class that implement it."""
KIND_NAMES = tuple(KINDS)
NEURAL_KINDS = ("neural", "frozen")
"""The kinds that take a ``--backbone``."""
LEGACY_BACKBONES = {"structured": "structured", "sklearn": "tfidf"}
"""Old ``--backbone`` values that named a kind, and the kind."""
DEFAULT_BACKBONES = {"neural": "tiny", "frozen": "minilm"}
"""The backbone of a neural kind when ``--backbone`` is not given."""
