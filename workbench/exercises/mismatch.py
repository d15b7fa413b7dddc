"""What every exercise check raises: where a learner's function parts from the reference, with a hint."""


class ExerciseMismatch(AssertionError):
    """A learner's function does not do what the reference does; the message says where and hints why.

    An AssertionError, so a notebook cell shows it as a failed check, and a test can catch it.

    Example:
        >>> from workbench.exercises import check_lr_schedule
        >>> def constant(step, *, lr, warmup_steps, total_steps, floor=0.0):
        ...     return lr  # no warm-up, no decay
        >>> try:
        ...     check_lr_schedule(constant)
        ... except ExerciseMismatch as mismatch:
        ...     print(type(mismatch).__name__, isinstance(mismatch, AssertionError))
        ExerciseMismatch True
    """
