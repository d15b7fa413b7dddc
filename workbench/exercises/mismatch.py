"""What every exercise check raises: where a learner's function parts from the reference, with a hint."""


class ExerciseMismatch(AssertionError):
    """A learner's function does not do what the reference does; the message says where and hints why."""
