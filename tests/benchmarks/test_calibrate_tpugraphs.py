"""benchmarks/calibrate_tpugraphs.py without --fit: the simulator and the analytical model against the vendored
TpuGraphs tile sample, per kernel and overall."""
import json

from benchmarks import calibrate_tpugraphs


def test_default_constants_against_the_vendored_sample(tmp_path, capsys):
    res = calibrate_tpugraphs.main(["--json", str(tmp_path / "cal.json")])
    assert res["data"] == "data/tpugraphs/tile_kernels.json" and res["kernels"] == 15 and res["tiles"] > 0
    assert "default_constants" in res and "fit" not in res
    assert json.loads((tmp_path / "cal.json").read_text())["kernels"] == 15
    assert "## Simulator (current defaults) vs analytical" in capsys.readouterr().out
