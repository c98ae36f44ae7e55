# Type stubs of the extension module tpfuse._tpfuse (python/tpfuse/_tpfuse.c).
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

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
class InputError(Error, ValueError): ...

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

_Shape = Optional[List[Union[int, str, None]]]

class Session:
    """A compiled model and its runtime session (made by open_session)."""

    def inputs(self) -> List[Tuple[str, int, _Shape]]: ...
    def outputs(self) -> List[Tuple[str, int, _Shape]]: ...
    def run(
        self, feeds: Sequence[Tuple[str, int, Tuple[int, ...], Any]]
    ) -> List[Tuple[str, int, Tuple[int, ...], bytearray]]: ...
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        eos: Sequence[int],
        suppress: Sequence[int],
        temperature: float,
        top_k: int,
        top_p: float,
        seed: int,
        pad_id: int,
        max_length: int = ...,
        prefill_chunk: int = ...,
    ) -> Tuple[List[List[int]], Dict[str, Union[int, float]]]: ...
    def close(self) -> None: ...

def open_session(
    model: _Source,
    rank: int = 0,
    world_size: int = 1,
    backend: str = "cpu",
    passes: Optional[str] = "default",
    *,
    lower: bool = True,
    base_dir: Optional[_Path] = None,
) -> Session: ...
