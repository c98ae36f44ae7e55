# Type stubs of the extension module tpfuse._tpfuse (python/tpfuse/_tpfuse.c).
import os
from typing import Dict, List, Optional, Tuple, Union

_Source = Union[bytes, bytearray, memoryview, str, "os.PathLike[str]"]
_Path = Union[str, "os.PathLike[str]"]

__version__: str

class Diagnostic(Tuple[str, Optional[str], Optional[str], str]):
    """One message of the library."""

    @property
    def severity(self) -> str: ...
    @property
    def node(self) -> Optional[str]: ...
    @property
    def op(self) -> Optional[str]: ...
    @property
    def message(self) -> str: ...

class Error(Exception):
    status: Optional[str]
    diagnostics: List[Diagnostic]

class ModelError(Error, ValueError): ...
class FileError(Error, OSError): ...
class UnsupportedError(Error): ...

def optimize(
    model: _Source,
    passes: Optional[str] = "default",
    rank: Optional[int] = None,
    world_size: Optional[int] = None,
    explain: bool = False,
    *,
    output: Optional[_Path] = None,
    external_data_threshold: Optional[int] = None,
    verify_each: bool = False,
    base_dir: Optional[_Path] = None,
) -> Tuple[Optional[bytes], Dict[str, Dict[str, int]], List[str], List[Diagnostic]]: ...
def check(
    model: _Source, *, raise_on_error: bool = False, base_dir: Optional[_Path] = None
) -> List[Diagnostic]: ...
def dump(
    model: _Source,
    format: str = "text",
    *,
    infer_shapes: bool = True,
    base_dir: Optional[_Path] = None,
) -> str: ...
def passes() -> List[Tuple[str, str, Tuple[str, ...]]]: ...
