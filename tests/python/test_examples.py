"""Every example family (examples/tpmodels.py) at world sizes 1, 2 and 4, every
rank: the Python API's pass statistics equal `tpfuse optimize --stats`, its
fusion counts equal the manifest's expected_fusions, and it writes the same
model as the command."""

from __future__ import annotations

import json
import os

import onnx
import pytest

import tpfuse
from conftest import read_cli_stats, run_cli


def _cases():
    import tpmodels

    return [(fam, w) for w in (1, 2, 4) for fam in tpmodels.FAMILIES]


def _fusion_counts(stats, model_path):
    """The manifest's expected_fusions keys, computed as examples/selftest.py does."""
    import selftest

    flat = {(p, c): v for p, counters in stats.items() for c, v in counters.items()}
    return selftest.fusion_counts(flat, model_path)


@pytest.mark.parametrize("family,world", _cases(), ids=lambda v: str(v))
def test_fusion_counts_equal_the_command(family, world, example_models, tpfuse_cli, tmp_path):
    folder = example_models[(family, world)]
    with open(os.path.join(folder, "%s_data" % family, "manifest.json")) as f:
        expected = json.load(f)["expected_fusions"]
    for rank in range(world):
        src = os.path.join(folder, "%s.rank%d.onnx" % (family, rank))
        cli_out = tmp_path / ("cli.rank%d.onnx" % rank)
        p = run_cli(tpfuse_cli, "optimize", src, "-o", str(cli_out), "--stats")
        assert p.returncode == 0, p.stderr
        cli_stats = read_cli_stats(p.stdout)

        by_path = tpfuse.optimize(src, output=tmp_path / ("api.rank%d.onnx" % rank))
        in_memory = tpfuse.optimize(onnx.load(src), rank=rank, world_size=world)
        assert by_path.stats == cli_stats, (family, world, rank)
        assert in_memory.stats == cli_stats, (family, world, rank)

        got = _fusion_counts(by_path.stats, by_path.output)
        wrong = {k: (v, expected.get(k)) for k, v in got.items() if expected.get(k) != v}
        assert not wrong, "%s W=%d rank %d (got, expected): %s" % (family, world, rank, wrong)
        # the same model as the command's, written or returned
        want = tpfuse.dump(cli_out)
        assert tpfuse.dump(by_path.output) == want
        assert tpfuse.dump(in_memory.model) == want
        onnx.checker.check_model(in_memory.model)
