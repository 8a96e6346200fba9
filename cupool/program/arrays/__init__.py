"""Plain array code under a budget: an array namespace over a session's tensors.

``it.xp`` is the namespace of the iteration being declared
(:class:`~cupool.program.arrays.namespace.ArrayNamespace`); a tensor's operators, methods
and ``__array_namespace__`` reach the same one (:mod:`cupool.program.tensor_methods`). A
step function written once against NumPy's functions, or against the array API standard
(``xp = x.__array_namespace__()``), runs without cupool on NumPy or CuPy arrays and under a
:class:`~cupool.program.session.Session` on its tensors, where each call is one declared op
(``it.op``: inputs, a new output whose shape and dtype NumPy's rules give, or an update for
the in-place forms), named after the function and the source line that called it. Modules,
lowest first:

- :mod:`.errors`: the typed errors, each naming the function, the operands' shapes and the
  call's source line;
- :mod:`.shapes`: result shapes and dtypes by NumPy's rules, without computing;
- :mod:`.views`: views as a base and a chain of view steps (no op, no buffer of their own);
- :mod:`.bodies`: what each op runs (the same NumPy/CuPy calls as the program without cupool);
- :mod:`.rules`: per kind of call, its result's shape and dtype and its op body;
- :mod:`.sites`: where a call comes from (its ``file:line``, the op's name, the cache key's
  site) and its errors;
- :mod:`.operands`: the quick signature of the common calls (tensors, views, numbers);
- :mod:`.structure`: the functions of shape, views, indexing and creation;
- :mod:`.namespace`: the namespace itself (the declaring core, operators, elementwise
  functions, linear algebra, reductions).
"""

from cupool.program.arrays.errors import (
    ArrayCallError,
    ArrayDtypeError,
    ArrayReleasedError,
    ArrayScopeError,
    ArraySessionClosedError,
    ArrayValueError,
    MissingFunctionError,
    ReadOnlyWriteError,
    ShapeMismatchError,
    UnsupportedFunctionError,
)
from cupool.program.arrays.namespace import ArrayNamespace
from cupool.program.arrays.views import View

__all__ = ["ArrayCallError", "ArrayDtypeError", "ArrayNamespace", "ArrayReleasedError",
           "ArrayScopeError", "ArraySessionClosedError", "ArrayValueError",
           "MissingFunctionError", "ReadOnlyWriteError", "ShapeMismatchError",
           "UnsupportedFunctionError", "View"]
