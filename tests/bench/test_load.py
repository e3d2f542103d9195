"""forkbench.load: the save's window of PING round trips, and
redis-benchmark's report."""
import pytest

from forkbench import load

BENCHMARK_OUTPUT = """====== SET ======
  100000 requests completed in 1.00 seconds
Latency by percentile distribution:
0.000% <= 0.103 milliseconds (cumulative count 1)
50.000% <= 0.503 milliseconds (cumulative count 50000)
99.000% <= 1.207 milliseconds (cumulative count 99000)
99.900% <= 3.007 milliseconds (cumulative count 99900)
100.000% <= 12.503 milliseconds (cumulative count 100000)

Summary:
  throughput summary: 99502.49 requests per second
"""


def test_parse_benchmark():
    got = load.parse_benchmark(BENCHMARK_OUTPUT)
    assert got == {"rps": 99502.49, "p50_ms": 0.503, "p99_ms": 1.207, "p999_ms": 3.007,
                   "max_ms": 12.503}


def test_parse_benchmark_refuses_what_it_cannot_read():
    with pytest.raises(RuntimeError):
        load.parse_benchmark("ERR unknown command")


def test_save_window_takes_the_ping_sent_before_the_bgsave():
    # A PING sent 5 ms before the BGSAVE and answered after the fork is the
    # fork's; one of 50 ms, over before the BGSAVE, is not the save's.
    samples = [(99.0, 50.0), (99.995, 136.0), (100.2, 2.0), (100.3, 0.5)]
    got = load.gap_summary(samples, 100.0, 120.0)
    assert got == {"gaps_over_1ms": 2, "max_gap_ms": 136.0, "total_gap_ms": 138.0}
    assert load.gap_summary(samples)["gaps_over_1ms"] == 3
    assert load.gap_summary([(1.0, 0.5)]) == {"gaps_over_1ms": 0, "max_gap_ms": 0.0,
                                             "total_gap_ms": 0}


def test_benchmark_command_is_the_documented_load():
    cmd = load.benchmark_cmd("/b", 7000, 1234, 256, 5000)
    assert cmd == ["/b/redis-benchmark", "-p", "7000", "-t", "set", "-r", "1234",
                   "-d", "256", "-c", "50", "-P", "4", "-n", "5000"]
