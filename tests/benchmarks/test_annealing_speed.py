"""benchmarks/annealing_speed.py: a short search on a small program reports its rate of configurations."""
from benchmarks import annealing_speed

PROGRAM = "examples/hlo/autoencoder_small_infer.hlo"


def test_a_short_search_reports_rates(capsys):
    res = annealing_speed.main(["--program", PROGRAM, "--seconds", "0.5"])
    assert res["program"] == PROGRAM and res["edges"] > 0 and res["evaluations"] > 0
    assert res["rate"] > 0 and res["steady_rate"] >= 0 and res["speedup"] > 0
    assert "configurations in" in capsys.readouterr().out
