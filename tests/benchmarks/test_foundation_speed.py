"""benchmarks/foundation_speed.py: load times and neighbour updates of a small program, both targets, with and
without hashes."""
from benchmarks import foundation_speed

PROGRAM = "examples/hlo/autoencoder_small_infer.hlo"


def test_load_and_neighbour_updates_of_a_small_program(capsys):
    res = foundation_speed.main(["--program", PROGRAM, "--seconds", "0.05", "--repeats", "1"])
    assert res["load"]["instructions"] > 0 and res["load"]["total_s"] > 0
    assert [(r["target"], r["hashed"]) for r in res["neighbors"]] == [
        ("tpu", False), ("tpu", True), ("cpu", False), ("cpu", True)]
    assert all(r["updates"] > 0 and r["kernels_default"] > 0 for r in res["neighbors"])
    assert "| target | fusible edges |" in capsys.readouterr().out
