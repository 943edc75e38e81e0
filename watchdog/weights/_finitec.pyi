# Stub of the optional C extension built from _finitec.c (setup.py).
from typing import Any

from numpy.typing import NDArray
from typing_extensions import Buffer

def any_nonfinite(buffer: Buffer | NDArray[Any], itemsize: int, bad_lo: int, /) -> bool: ...
