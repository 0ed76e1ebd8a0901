"""benchmarks/simulator_speed.py: simulator and analytical-model throughput on one small program, few items."""
from benchmarks import simulator_speed


def test_throughputs_of_a_small_program():
    res = simulator_speed.main(["--programs", "examples/hlo/autoencoder_small_infer.hlo", "--n", "200"])
    assert res["programs"] == ["autoencoder_small_infer.hlo"] and res["distinct_kernels"] > 0
    assert all(res[k] > 0 for k in ("cold_seconds_per_kernel", "sim_default_tile_per_s", "sim_explicit_tile_per_s",
                                    "analytical_explicit_tile_per_s"))
